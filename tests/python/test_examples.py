"""The examples of examples/python/, run as a user runs them (short settings)."""
import os
import subprocess
import sys

from conftest import PYTHONPATH, SOURCE, needs_torch

EXAMPLES = os.path.join(SOURCE, "examples", "python")


def run_example(name, *args, cwd):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], capture_output=True,
                       text=True, env=env, cwd=cwd, timeout=600)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


@needs_torch
def test_resnet50_under_the_planned_arena(tmp_path):
    out = run_example("resnet50_cpu.py", "--steps", "3", "--warmup", "2", cwd=tmp_path)
    assert "OS calls per steady inference      0\n" in out, out
    assert "allocated_bytes.all.peak" in out and "planned" in out


def test_plan_a_model_with_a_picture(tmp_path):
    out = run_example("plan_model.py", "-o", "p.html", "--json", "p.json", cwd=tmp_path)
    assert "modelmem.Plan" in out and "largest tensors" in out
    assert (tmp_path / "p.html").stat().st_size > 1000 and (tmp_path / "p.json").exists()


@needs_torch
def test_two_models_in_pools_with_quotas(tmp_path):
    out = run_example("two_pools.py", cwd=tmp_path)
    assert "encoder, batch 64 x 512: refused:" in out and "encoder" in out
    assert "quota" in out.split("refused:")[1].splitlines()[0]
    assert "pool classifier" in out and "pool encoder" in out


def test_snapshot_analysed(tmp_path):
    out = run_example("snapshot_analysis.py", cwd=tmp_path)
    assert "peak live 40.0 MiB" in out and "peak reserved 64.0 MiB" in out
    assert "train.py:32 forward" in out
    assert (tmp_path / "snapshot.html").exists()
