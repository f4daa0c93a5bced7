"""The serving-API registry is what the profile reads: every API the profile accepts is registered, and each option
is accepted exactly where an API's traits say it is taken, refused elsewhere naming the APIs that take it."""
from __future__ import annotations

import typing

import pytest

from tailrace.contract.apis import APIS, REGISTRY, names_where
from tailrace.contract.profile import Endpoint, ProfileError, parse_profile

OPTIONS = {  # trait → what an endpoint sets to use it
    "sessions": {"sessions": {}},
    "images": {"prompts": {"images": {"share": 1.0}}},
    "audio": {"prompts": {"audio": {"seconds": 1.0}}},
    "structured": {"prompts": {"structured": {"schema": {"type": "object"}}}},
    "model_in_body": {"model": [{"name": "a"}, {"name": "b"}]},
    "cancel": {"cancel": {"share": 0.5, "after": "first_token"}},
    "token_count_output": {"token_count_output": "COUNT"},
}


def _profile(protocol: str, option: dict) -> None:
    api = REGISTRY[protocol]
    url = {"inprocess": "inprocess"}.get(protocol, f"{api.schemes[0] if api.schemes else 'http'}://127.0.0.1:9")
    endpoint = {"name": "e", "url": url, "protocol": protocol, "model": "m", **option}
    if "prompts" in option or api.generative:
        endpoint["prompts"] = {**({"input_tokens": 8} if api.generative or api.pooling else {}),
                               **option.get("prompts", {})}
    parse_profile({"name": "p", "endpoints": [endpoint], "regions": [{"name": "r", "share": 1.0}],
                   "load": {"rate": 1, "duration_s": 1}}, "p.toml")


def test_every_protocol_the_profile_takes_is_registered_once():
    declared = typing.get_args(Endpoint.model_fields["protocol"].annotation)
    assert set(declared) == set(REGISTRY) and len(APIS) == len(REGISTRY)
    assert all(a.routes or a.family == "inprocess" for a in APIS)


@pytest.mark.parametrize("trait", sorted(OPTIONS))
@pytest.mark.parametrize("protocol", [a.name for a in APIS if a.generative])
def test_an_option_is_taken_exactly_where_the_apis_traits_say(trait, protocol):
    takes = bool(getattr(REGISTRY[protocol], trait))
    if takes:
        _profile(protocol, OPTIONS[trait])
        return
    with pytest.raises(ProfileError) as err:
        _profile(protocol, OPTIONS[trait])
    takers = names_where(lambda a: getattr(a, trait))
    assert takers[0] in str(err.value) and f"not {protocol}" in str(err.value), str(err.value)
