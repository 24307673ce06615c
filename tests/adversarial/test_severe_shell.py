"""Issue 11, severe 3: shell injection through newlines in host / node names, --job-name, --partition.

Every vector goes through the CLI's ``main(argv)`` (``python -m launch --dry-run`` and
``python -m launch.slurm``): it must be refused with exactly one ``error:`` line, exit status 2 and nothing
on stdout (no script). Names SLURM and DNS accept still produce a script in which every interpolation is
quoted and ``bash`` runs nothing it was not meant to.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launch import cli as launch_cli
from launch import slurm as launch_slurm
from launch.runner import process_argv
from launch.torchrun_cmds import NodeCommand

PLAN = {"schema_version": 1, "num_layers": 2, "micro_batch_size": 1, "global_batch_size": 1,
        "stages": [{"first_layer": 0, "num_layers": 2, "replicas": [{"gpu_type": "A100", "tp": 1, "zone": "z-a"}]}]}
EVIL = "a1\ntouch /tmp/sailor_pwned #"


def _files(tmp_path: Path, host: str = "gpu-a1", name: str = "n0", zone: str = "z-a") -> tuple[str, str]:
    plan, nodes = tmp_path / "plan.json", tmp_path / "nodes.json"
    plan.write_text(json.dumps(PLAN))
    nodes.write_text(json.dumps({"nodes": [{"host": host, "name": name, "gpu_type": "A100", "zone": zone,
                                            "gpus_per_node": 1}]}))
    return str(plan), str(nodes)


def _one_line(capsys: pytest.CaptureFixture) -> str:
    out, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.strip()]
    assert out == "" and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, (out, err)
    assert len(lines[0]) < 300
    return lines[0]


@pytest.mark.parametrize("field, value", [
    ("host", EVIL), ("name", EVIL), ("host", "-oProxyCommand=touch${IFS}/tmp/x"), ("host", "a b"),
    ("host", "a;b"), ("name", "n0$(touch x)"), ("zone", "z\n-a")])
@pytest.mark.parametrize("tool", ["launch", "slurm"])
def test_hostile_inventory_names_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture, field: str,
                                             value: str, tool: str) -> None:
    plan, nodes = _files(tmp_path, **{field: value})
    main = launch_cli.main if tool == "launch" else launch_slurm.main
    argv = [plan, "--nodes-file", nodes] + (["--dry-run"] if tool == "launch" else [])
    assert main(argv) == 2
    assert f"'{field}'" in _one_line(capsys)


@pytest.mark.parametrize("flag", ["--job-name", "--partition", "--account", "--time", "--workdir"])
def test_hostile_slurm_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture, flag: str) -> None:
    plan, nodes = _files(tmp_path)
    assert launch_slurm.main([plan, "--nodes-file", nodes, flag, EVIL]) == 2
    assert flag in _one_line(capsys)


def test_accepted_names_give_a_script_that_runs_only_what_it_should(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    plan, nodes = _files(tmp_path, host="gpu-a1.example.org", name="node_0.a-1")
    marker = tmp_path / "ran"
    assert launch_slurm.main([plan, "--nodes-file", nodes, "--job-name", "my.job-1", "--partition", "gpu_a",
                              "--time", "1-02:00:00", "--workdir", str(tmp_path / "dir with space"),
                              "--", "--data-path", f"$(touch {marker})"]) == 0
    script = capsys.readouterr().out
    stub = tmp_path / "job.sh"                       # srun records its arguments instead of running anything
    stub.write_text(script.replace("set -euo pipefail", "set -euo pipefail\nsrun() { printf '%s\\n' \"$@\" >> "
                                   f"{tmp_path}/srun.args; }}\ncd() {{ :; }}", 1))
    subprocess.run(["bash", str(stub)], check=True, cwd=tmp_path, timeout=30)
    assert not marker.exists()
    args = (tmp_path / "srun.args").read_text()
    assert f"$(touch {marker})" in args and "--nodelist=gpu-a1.example.org" in args


def test_ssh_gets_an_option_terminator_before_the_host() -> None:
    cmd = NodeCommand(node_name="n1", host="gpu-remote-1", node_rank=1, env=(), argv=("torchrun", "x.py"))
    argv, _ = process_argv(cmd, "/work")
    assert argv[:4] == ["ssh", "-o", "BatchMode=yes", "--"] and argv[4] == "gpu-remote-1"
