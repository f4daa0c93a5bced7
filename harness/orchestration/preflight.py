"""Checks of a profile against this machine before a local run starts anything: each failure is a ValueError
naming the profile field, so the CLI exits 2 with one line and nothing is left running."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tailrace.contract.plan import unresolved_plan
from tailrace.contract.profile import Embedded, Profile

DEFAULT_MODELS_DIR = Embedded.model_fields["models_dir"].default  # built on first use (documented in README)


def check_cpus(cpus: list[int] | None, field: str) -> None:
    """Raise ValueError naming `field` when a CPU of `cpus` is not one this process may run on."""
    if not cpus:
        return
    available = sorted(os.sched_getaffinity(0))
    missing = [c for c in cpus if c not in available]
    if missing:
        raise ValueError(f"{field}: CPU {', '.join(map(str, missing))} not available here "
                         f"(this machine offers {', '.join(map(str, available))})")


def check_placement(profile: Profile) -> None:
    """Raise ValueError naming the field when the profile pins processes to CPUs this machine lacks."""
    check_cpus(profile.embedded.cpus, "embedded.cpus")
    check_cpus(profile.generator.cpus, "generator.cpus")


def unwritable(out: Path) -> str | None:
    """Why the directory `out` (made when first written if it does not exist yet) cannot take files, or None:
    tried for real, leaving nothing behind — a directory made and removed in it, or in the nearest existing
    directory above it (where its making would start)."""
    if out.exists() and not out.is_dir():
        return "is a file, not a directory"
    at = out.absolute()
    while not at.exists() and at != at.parent:
        at = at.parent
    if not at.is_dir():
        return f"cannot be made: {at} is a file"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tailrace-check-", dir=at))
    except OSError as exc:
        return f"cannot be written: {exc.strerror or exc}"
    return None


def check_output(out: Path, field: str = "output_dir") -> None:
    """The runs directory (`field`: where it was given) must be a directory files can be made in, or one that can be
    made: checked before anything starts, so that a run never ends on it."""
    if (why := unwritable(out)) is not None:
        raise ValueError(f"{field}: {out} {why}")


def needs_models_build(profile: Profile) -> bool:
    """The default repository (build/models) is built, or rebuilt, when it lacks its data or a model the profile's
    embedded endpoints name (a repository built by an older tailrace lacks the generative models)."""
    models = Path(profile.embedded.models_dir)
    if not profile.uses_embedded:
        return False
    if not (models / "_data").exists():
        return profile.embedded.models_dir == DEFAULT_MODELS_DIR or not models.exists()
    return profile.embedded.models_dir == DEFAULT_MODELS_DIR and any(
        not (models / e.model).is_dir() for e in profile.endpoints if e.url == "embedded")


def check_local(profile: Profile, out: Path) -> None:
    """Everything a local run needs from this machine: CPUs, an output directory, the model repositories and
    the inputs its endpoints use. Only the default repository (build/models) is built on demand."""
    check_placement(profile)
    check_output(out)
    models = Path(profile.embedded.models_dir)
    if profile.uses_embedded and not models.exists() and profile.embedded.models_dir != DEFAULT_MODELS_DIR:
        raise ValueError(f"embedded.models_dir: {models} does not exist (build it with "
                         f"`tailrace models build --out {models}`)")
    if profile.uses_triton and not Path(profile.triton.models_dir).is_dir():
        raise ValueError(f"triton.models_dir: {profile.triton.models_dir} does not exist (build it with "
                         f"`tailrace models build --out {profile.triton.models_dir}`)")
    will_build = needs_models_build(profile)
    plan = unresolved_plan(profile, "", "", data_root=str(Path.cwd()))
    for i, ep in enumerate(profile.endpoints):
        source = plan.data_source(ep)
        field = f"endpoints[{i}].data" if ep.data is not None else "inputs.dataset"
        built_later = will_build and Path(source).resolve().is_relative_to(models.resolve())
        if source not in ("random", "zero") and not built_later and not Path(source).exists():
            raise ValueError(f"{field}: {source} not found (the workers send its samples; `tailrace models build "
                             f"--out {models}` writes the built-in models' data files)")
    for i, ep in enumerate(profile.endpoints):
        onnx = models / ep.model / "1" / "model.onnx"
        if ep.protocol == "inprocess" and models.is_dir() and not onnx.is_file():
            raise ValueError(f"endpoints[{i}].model: inprocess needs {onnx} (an ONNX model)")
        repository = {"embedded": models, "triton": Path(profile.triton.models_dir)}.get(ep.url)
        if repository is not None and repository.is_dir() and not (repository / ep.model).is_dir() and not (
                will_build and ep.url == "embedded"):
            served = sorted(d.name for d in repository.iterdir() if d.is_dir() and not d.name.startswith("_"))
            raise ValueError(f"endpoints[{i}].model: no model {ep.model!r} in {repository} "
                             f"(models: {', '.join(served)})")
