"""modelmem.place(): the library's placement from Python, the same text and objects as the CLI."""
import os
import subprocess

import pytest

from conftest import CLI, SOURCE

modelmem = pytest.importorskip("modelmem")

RESNET = os.path.join(SOURCE, "models", "resnet50.onnx")


def cli(*args):
    return subprocess.run([CLI, "place", *args], capture_output=True, text=True,
                          check=True).stdout


def test_place_matches_the_command():
    p = modelmem.place([RESNET], "2x910A", dims={"batch": 64}, dtype="fp16", replicas=2)
    assert p.fits
    args = [RESNET, "--dim", "batch=64", "--dtype", "fp16", "--replicas", "2", "--devices",
            "2x910A"]
    assert p.report() == cli(*args)
    assert p.emit("hami") == cli(*args, "--emit", "hami")
    assert p.emit("ray", ray_app="serve:build") == cli(*args, "--emit", "ray", "--ray-app",
                                                       "serve:build")
    assert [r["device"] for r in p.replicas] == ["0", "1"]
    assert [r["template"] for r in p.replicas] == ["vir02", "vir02"]
    cap = p.cap(1, "vnpu")
    assert cap["visible"] == 2184 << 20
    assert cap["request"] == p.replicas[1]["request"] == cap["need"] + (1 << 30)
    assert int(cap["fraction"] * cap["visible"]) == cap["need"] == p.replicas[1]["need"]
    assert p.replicas[1]["overhead"] == 1 << 30
    assert cap["MODELMEM_ALLOC_CONF"] == \
        f"strategy:caching,pools:[resnet50:{cap['need'] >> 20}],default_pool:resnet50"
    static = modelmem.place([RESNET], "1x910A", dims={"batch": 64}, dtype="fp16",
                            strategy="static", overhead="256MiB")
    assert static.report() == cli(RESNET, "--dim", "batch=64", "--dtype", "fp16", "--devices",
                                  "1x910A", "--strategy", "static", "--overhead", "256MiB")
    assert static.replicas[0]["request"] == static.replicas[0]["need"] + (256 << 20)
    with pytest.raises(modelmem.InvalidInputError, match="--strategy"):
        modelmem.place([RESNET], "1x910A", dims={"batch": 1}, strategy="bogus")
    # None is "not given", as everywhere in the package ("" is still taken)
    given = modelmem.place([RESNET], "1x910A", dims={"batch": 1}, strategy=None, overhead=None)
    assert given.report() == modelmem.place([RESNET], "1x910A", dims={"batch": 1}).report()
    assert given.report() == modelmem.place([RESNET], "1x910A", dims={"batch": 1}, strategy="",
                                            overhead="").report()


def test_place_without_room_and_bad_input():
    p = modelmem.place([RESNET], "1x1MiB", dims={"batch": 1})
    assert not p.fits and len(p.messages) == 1
    assert p.replicas[0]["device"] is None
    with pytest.raises(modelmem.InvalidInputError):
        p.emit("hami")
    with pytest.raises(modelmem.InvalidInputError, match="--devices"):
        modelmem.place([RESNET], "8xbanana", dims={"batch": 1})
    with pytest.raises(modelmem.InvalidInputError, match="go with a list of ONNX files"):
        modelmem.place("models.yaml", "8x910A", replicas=2)


def test_a_served_llm_and_a_cpu_budget(tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - name: gpt2\n    model: {SOURCE}/models/gpt2_decoder.onnx\n"
                      "    serve: {context: 1024, concurrency: 4}\n    overhead: 512MiB\n")
    p = modelmem.place(str(models), "1x16GiB")
    assert p.report() == cli("--models", str(models), "--devices", "1x16GiB")
    # max_num_seqs is the word (serve --max-num-seqs, the engines); concurrency its older name
    same = tmp_path / "same.yaml"
    same.write_text(models.read_text().replace("concurrency: 4", "max_num_seqs: 4"))
    assert modelmem.place(str(same), "1x16GiB").report() == p.report()
    cap = p.cap(0, "hami")
    assert "--kv-cache-memory-bytes" in cap["MODELMEM_VLLM_ARGS"]
    assert cap["request"] == cap["need"] + (512 << 20)
    host = modelmem.place([RESNET], "1x1GiB:cpu", dims={"batch": 2}, runtime="eager")
    assert host.fits and host.replicas[0]["overhead"] == 0
    assert "config         resnet50 on host: strategy:caching,pools:[resnet50:" in host.report()
    with pytest.raises(modelmem.InvalidInputError, match="cpu budget"):
        host.emit("hami")
    # Ray counts a cpu budget's MiB like a device's; the pool's quota is the only cap.
    ray_cap = host.cap(0, "ray")
    assert "PYTORCH_CUDA_ALLOC_CONF" not in ray_cap and "PYTORCH_NPU_ALLOC_CONF" not in ray_cap
    assert "modelmem_mib_0: " in host.emit("ray")
