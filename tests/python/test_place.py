"""`modelmem place`: the objects it emits load into the kubernetes client's models
(Pod, Deployment) without losing a field, and the DRA objects (resource.k8s.io/v1, newer than
that client) are checked field by field against the API reference (docs/fleet.md)."""
import json
import os
import re
import subprocess

import pytest
import yaml

from conftest import CLI, SOURCE

kubernetes = pytest.importorskip("kubernetes", reason="python3-kubernetes is not installed")
from kubernetes.client import ApiClient  # noqa: E402

MODELS = os.path.join(SOURCE, "models")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


def place(*args, code=0):
    r = subprocess.run([CLI, "place", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == code, r.stderr + r.stdout
    return r.stdout


@pytest.fixture(scope="module")
def models_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("place") / "models.yaml"
    path.write_text(f"""models:
  - name: tiny
    model: {MODELS}/tiny.onnx
    dims: {{n: 64}}
    replicas: 3
  - name: tiny-fp16
    model: {MODELS}/tiny.onnx
    dims: {{n: 64}}
    dtype: fp16
    replicas: 2
""")
    return str(path)


def loads_unchanged(obj, cls):
    """Deserializes into the client's model and back: every field must survive."""
    api = ApiClient()
    model = api.deserialize(json.dumps(obj), cls, "application/json")
    assert api.sanitize_for_serialization(model) == obj
    return model


def documents(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


def env_of(container):
    return {e["name"]: e["value"] for e in container["env"]}


def check_env(container, request_mib, torch_var):
    # The pool's quota is the need on the strategy; the request adds the kind's default overhead
    # (1 GiB on cuda and npu) once.
    env = env_of(container)
    name = container["name"]
    m = re.fullmatch(r"strategy:caching,pools:\[([a-z0-9-]+):([0-9]+)\],default_pool:([a-z0-9-]+)",
                     env["MODELMEM_ALLOC_CONF"])
    assert m and m[1] == m[3] == name, env["MODELMEM_ALLOC_CONF"]
    assert int(m[2]) + 1024 == request_mib
    assert re.fullmatch(r"per_process_memory_fraction:[0-9.e-]+", env[torch_var])


@pytest.mark.parametrize("devices,kind,torch_var", [
    ("8x910A", "Ascend910A", "PYTORCH_NPU_ALLOC_CONF"),
    ("8x64GiB", None, "PYTORCH_CUDA_ALLOC_CONF"),
])
def test_hami_deployments_and_pods_load(models_file, devices, kind, torch_var):
    docs = documents(place("--models", models_file, "--devices", devices, "--emit", "hami"))
    assert [d["kind"] for d in docs] == ["Deployment", "Deployment"]
    for d in docs:
        dep = loads_unchanged(d, "V1Deployment")
        container = d["spec"]["template"]["spec"]["containers"][0]
        limits = container["resources"]["limits"]
        if kind:
            assert limits[f"huawei.com/{kind}"] == "1"
            mib = int(limits[f"huawei.com/{kind}-memory"])
        else:
            assert limits["nvidia.com/gpu"] == "1"
            mib = int(limits["nvidia.com/gpumem"])
        check_env(container, mib, torch_var)
        assert dep.spec.replicas == (3 if d["metadata"]["name"] == "tiny" else 2)
    pods = documents(place("--models", models_file, "--devices", devices, "--emit", "hami",
                           "--pods"))
    assert len(pods) == 5
    for p in pods:
        loads_unchanged(p, "V1Pod")


def test_vnpu_pods_load_with_a_template(models_file):
    out = place("--models", models_file, "--devices", "8x910A", "--emit", "vnpu")
    assert "# static vNPU: vir02 of 2184 MiB" in out
    for p in documents(out):
        loads_unchanged(p, "V1Pod")
        limits = p["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {"huawei.com/Ascend910-2c": "1"}


# resource.k8s.io/v1, from the Kubernetes API reference (ResourceClaim v1, DeviceClass v1):
# each object's fields, their types and which are required.
def check_fields(obj, schema, where):
    assert isinstance(obj, dict), where
    for key, value in obj.items():
        assert key in schema["fields"], f"{where}.{key}: not a field of the API"
        check_value(value, schema["fields"][key], f"{where}.{key}")
    for key in schema.get("required", []):
        assert key in obj, f"{where}.{key}: required"


def check_value(value, spec, where):
    if isinstance(spec, dict) and "fields" in spec:
        check_fields(value, spec, where)
    elif isinstance(spec, list):
        assert isinstance(value, list) and value, where
        for i, item in enumerate(value):
            check_value(item, spec[0], f"{where}[{i}]")
    elif spec == "quantity":
        assert isinstance(value, str) and QUANTITY.match(value), f"{where}: {value!r}"
    elif spec == "quantity-map":
        assert isinstance(value, dict) and value, where
        for k, v in value.items():
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[a-zA-Z0-9_.-]+)?", k), where
            check_value(v, "quantity", f"{where}.{k}")
    elif spec == "labels":
        assert isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    elif isinstance(spec, tuple):
        assert value in spec, f"{where}: {value!r} not one of {spec}"
    else:
        assert isinstance(value, spec), f"{where}: {type(value).__name__}"


META = {"fields": {"name": str, "namespace": str, "labels": "labels"}, "required": ["name"]}
SELECTOR = {"fields": {"cel": {"fields": {"expression": str}, "required": ["expression"]}}}
EXACT = {"fields": {"deviceClassName": str, "selectors": [SELECTOR],
                    "allocationMode": ("ExactCount", "All"), "count": int, "adminAccess": bool,
                    "tolerations": list,
                    "capacity": {"fields": {"requests": "quantity-map"}}},
         "required": ["deviceClassName"]}
REQUEST = {"fields": {"name": str, "exactly": EXACT, "firstAvailable": list}, "required": ["name"]}
RESOURCE_CLAIM = {"fields": {
    "apiVersion": ("resource.k8s.io/v1",), "kind": ("ResourceClaim",), "metadata": META,
    "spec": {"fields": {"devices": {"fields": {"requests": [REQUEST], "constraints": list,
                                               "config": list}}}}},
    "required": ["apiVersion", "kind", "metadata", "spec"]}
DEVICE_CLASS = {"fields": {
    "apiVersion": ("resource.k8s.io/v1",), "kind": ("DeviceClass",), "metadata": META,
    "spec": {"fields": {"selectors": [SELECTOR], "config": list, "extendedResourceName": str}}},
    "required": ["apiVersion", "kind", "metadata", "spec"]}
# Pod fields the client of Debian 12 predates (core/v1 PodResourceClaim, ResourceClaim).
POD_CLAIM = {"fields": {"name": str, "resourceClaimName": str, "resourceClaimTemplateName": str},
             "required": ["name"]}
CONTAINER_CLAIM = {"fields": {"name": str, "request": str}, "required": ["name"]}


def test_dra_objects_match_the_api_reference(models_file):
    out = place("--models", models_file, "--devices", "8x64GiB", "--emit", "dra")
    docs = documents(out)
    kinds = [d["kind"] for d in docs]
    assert kinds.count("DeviceClass") == 1 and kinds.count("ResourceClaim") == 5
    classes = {}
    claims = {}
    for d in docs:
        if d["kind"] == "DeviceClass":
            check_fields(d, DEVICE_CLASS, "DeviceClass")
            assert d["spec"]["selectors"][0]["cel"]["expression"] == \
                'device.driver == "gpu.nvidia.com"'
            classes[d["metadata"]["name"]] = d
        elif d["kind"] == "ResourceClaim":
            check_fields(d, RESOURCE_CLAIM, "ResourceClaim")
            claims[d["metadata"]["name"]] = d
        else:
            assert d["kind"] == "Pod"
            spec = dict(d["spec"])
            pod_claims = spec.pop("resourceClaims")
            for c in pod_claims:
                check_fields(c, POD_CLAIM, "Pod.spec.resourceClaims")
            container = dict(spec["containers"][0])
            resources = dict(container.pop("resources"))
            for c in resources.pop("claims"):
                check_fields(c, CONTAINER_CLAIM, "container.resources.claims")
                assert c["name"] == pod_claims[0]["name"]
            assert not resources
            spec["containers"] = [container]
            loads_unchanged(dict(d, spec=spec), "V1Pod")
            claim = claims[pod_claims[0]["resourceClaimName"]]
            exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
            assert exactly["deviceClassName"] in classes
            mib = int(exactly["capacity"]["requests"]["memory"][:-2])
            check_env(d["spec"]["containers"][0], mib, "PYTORCH_CUDA_ALLOC_CONF")


def test_ray_serve_config(models_file):
    # One application per replica, pinned by the MiB resource of the device it was placed on,
    # which the `ray start` comment declares at the device's memory (tests/fleet runs it).
    text = place("--models", models_file, "--devices", "8x910A", "--emit", "ray")
    doc = yaml.safe_load(text)
    (start,) = re.findall(r"^# ray-start \(this node\): ray start --head --resources='(.*)'$",
                          text, re.M)
    declared = json.loads(start)
    assert declared == {f"modelmem_mib_{i}": 32768 for i in range(8)}
    apps = doc["applications"]
    assert [a["name"] for a in apps].count("tiny-0") == 1 and len(apps) == 5
    used = {}
    for a in apps:
        assert a["route_prefix"] == "/" + a["name"] and a["import_path"] == "app:build"
        (dep,) = a["deployments"]
        assert dep["name"] == a["args"]["model"] and dep["num_replicas"] == 1
        options = dep["ray_actor_options"]
        assert set(options) == {"resources", "runtime_env"}
        ((resource, mib),) = options["resources"].items()
        assert resource == f"modelmem_mib_{a['args']['device']}" and isinstance(mib, int)
        used[resource] = used.get(resource, 0) + mib
        env = options["runtime_env"]["env_vars"]
        assert set(env) == {"MODELMEM_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF",
                            "ASCEND_RT_VISIBLE_DEVICES"}
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == a["args"]["device"]
        check_env({"name": dep["name"], "env": [{"name": k, "value": v} for k, v in env.items()]},
                  mib, "PYTORCH_NPU_ALLOC_CONF")
    assert all(used[r] <= declared[r] for r in used)


def test_no_placement_is_one_line_per_replica():
    model = os.path.join(MODELS, "resnet50.onnx")
    out = place(model, "--dim", "batch=1", "--replicas", "3", "--devices", "1x1MiB", code=1)
    assert "fits           no" in out
    assert out.count("does not fit   ") == 3
    r = subprocess.run([CLI, "place", model, "--dim", "batch=1", "--devices", "1x1MiB",
                        "--emit", "hami"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "do not fit" in r.stderr


@pytest.mark.parametrize("text,message", [
    ("models:\n  - model: tiny.onnx\n    replica: 2\n", "unknown key 'replica'"),
    ("models: [tiny.onnx\n", "not valid YAML or JSON"),
    ("models:\n  - model: missing.onnx\n", "missing.onnx: no such ONNX model file"),
    ('{"models": [{"model": "tiny.onnx", "dtype": "fp8"}]}', "dtype fp8"),
    ("models:\n  - model: tiny.onnx\n    replicas: 0\n", "replicas: a whole number"),
    ("models:\n  - model: tiny.onnx\n    strategy: bogus\n", "model tiny: strategy bogus"),
    ("models:\n  - model: tiny.onnx\n    overhead: 5%\n", "model tiny: overhead '5%'"),
    ("models:\n  - model: tiny.onnx\n    serve: {context: 64}\n",
     "serve: give max_num_seqs (sequences at the context; also concurrency) or kv_tokens"),
    ("models:\n  - model: tiny.onnx\n    serve: {max_num_seqs: 2, concurrency: 2}\n",
     "max_num_seqs and concurrency are one setting"),
    ("models:\n  - model: tiny.onnx\n    dims: {n: 2}\n    serve: {concurrency: 2}\n",
     "dims and runtime are for a model placed by its plan"),
    ("models:\n  - model: tiny.onnx\n    serve: {concurrency: 2, kv_dtype: fp9}\n",
     "model tiny: serve: "),
])
def test_bad_models_file_is_one_line_and_nothing_else(tmp_path, text, message):
    (tmp_path / "tiny.onnx").write_bytes(open(os.path.join(MODELS, "tiny.onnx"), "rb").read())
    path = tmp_path / "models.yaml"
    path.write_text(text)
    r = subprocess.run([CLI, "place", "--models", str(path), "--devices", "8x910A"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_devices_file_and_heuristic_beyond_the_exact_limit(models_file):
    nodes = os.path.join(SOURCE, "examples", "fleet", "nodes.yaml")
    out = place("--models", models_file, "--devices", nodes, "--exact-limit", "3")
    assert "best-fit decreasing (5 replicas > 3" in out
    assert "atlas-a/0" in out and "gpu-b/3" in out
    for d in documents(place("--models", models_file, "--devices", nodes, "--emit", "hami")):
        loads_unchanged(d, "V1Deployment")
        assert d["spec"]["template"]["spec"]["nodeSelector"] == {
            "kubernetes.io/hostname": "atlas-a"}
