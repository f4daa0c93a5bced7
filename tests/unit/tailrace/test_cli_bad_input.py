"""A user's path or flag that cannot work is one line and exit 2 — not tailrace's own failure (exit 5)."""
from __future__ import annotations

import pytest

from tailrace.cli import main
from tailrace.contract.exit_codes import USAGE


def test_a_model_repository_that_cannot_be_written_is_one_line(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "models"  # below a file: no directory can be made there
    assert main(["models", "build", "--out", str(out)]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot write the model repository to {out}" in err and "Not a directory" in err


def test_an_export_to_an_address_that_is_not_a_url_is_refused_before_reading(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["export", "otlp", str(tmp_path), "--endpoint", "collector:4318"])
    assert stopped.value.code == USAGE
    assert "--endpoint: 'collector:4318': the scheme must be http:// or https://" in capsys.readouterr().err


def test_manifests_that_cannot_be_written_are_one_line(tmp_path, capsys):
    from tests import ROOT

    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "k8s"
    code = main(["deploy", "kubernetes", str(ROOT / "profiles" / "kubernetes-example.toml"), "--image", "tailrace:1",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == USAGE and f"cannot write the manifests to {out} (Not a directory" in err
    assert "internal error" not in err


def test_a_sweeps_set_is_validated_like_the_file_before_anything_starts(tmp_path, capsys):
    from tests import ROOT

    profile = ROOT / "profiles" / "sweep-frontier.toml"
    assert main(["sweep", str(profile), "--set", "load.nosuch=1", "--out", str(tmp_path)]) == USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(with load.nosuch=1): load.nosuch: unknown key" in err
    assert not any(tmp_path.iterdir())  # no sweep directory made


@pytest.mark.parametrize(("argv", "words"), [
    (["probe", "http://127.0.0.1:1", "--model", "m", "--requests", "-1"], "--requests: expected a whole number ≥ 0"),
    (["probe", "http://127.0.0.1:1", "--model", "m", "--batch-size", "0"], "--batch-size: expected a whole number ≥ 1"),
    (["probe", "http://127.0.0.1:1", "--model", "m", "--output-tokens", "x"], "--output-tokens: expected a whole number"),
    (["worker", "--master", "127.0.0.1:1", "--region", "r", "--index", "-2"], "--index: expected a whole number ≥ 0"),
    (["worker", "--master", "127.0.0.1:1", "--region", "r", "--metrics-port", "70000"],
     "--metrics-port: expected a TCP port 1-65535, or 0 for a free one"),
    (["serve", "--models", "m", "--max-body-bytes", "0"], "--max-body-bytes: expected a whole number ≥ 1"),
])
def test_a_count_or_a_port_out_of_range_is_refused_as_a_flag(argv, words, capsys):
    """A negative request count had been taken as none, a batch of 0 sent on: each is one usage error now."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == USAGE and words in capsys.readouterr().err


def test_ctrl_c_in_a_command_with_nothing_to_keep_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    """Ctrl-C during `tailrace analyze` (or compare, probe, …) had printed Python's traceback of wherever it landed."""
    import tailrace.cli as cli

    def interrupted(_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_analyze", interrupted)
    assert main(["analyze", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err == "tailrace analyze: interrupted\n", err


@pytest.mark.parametrize("flag", ["--worker-memory", "--master-memory", "--results-storage"])
@pytest.mark.parametrize("size", ["lots", "0Gi", "100m", "2 Gi"])
def test_a_size_kubernetes_would_refuse_is_refused_before_any_manifest(flag, size, tmp_path, capsys):
    """A pod's memory or the results volume not written as a Kubernetes quantity: one line, exit 2, no manifests
    (they had been written, for the cluster to refuse at `kubectl apply`)."""
    from tests import ROOT

    with pytest.raises(SystemExit) as stopped:
        main(["deploy", "kubernetes", str(ROOT / "profiles" / "kubernetes-example.toml"), "--image", "tailrace:1",
              "--out", str(tmp_path / "k8s"), flag, size])
    assert stopped.value.code == USAGE
    assert f"argument {flag}: expected a size such as 512Mi, 2Gi or 1G, got {size!r}" in capsys.readouterr().err
    assert not (tmp_path / "k8s").exists()


def test_the_sizes_kubernetes_takes_pass(tmp_path):
    from tests import ROOT

    for size in ("512Mi", "1.5Gi", "1G", "1e9", "2048"):
        assert main(["deploy", "kubernetes", str(ROOT / "profiles" / "kubernetes-example.toml"), "--image",
                     "tailrace:1", "--out", str(tmp_path / size), "--worker-memory", size]) == 0
        workers = "".join(f.read_text() for f in (tmp_path / size).glob("30-workers-*.yaml"))
        assert any(f"memory: {written}\n" in workers for written in (size, f"'{size}'", f'"{size}"')), workers
