"""Every object `modelmem place --emit hami|vnpu|dra` writes, read into the kubernetes client's
typed models (the OpenAPI types of the API version the object names) with unknown fields refused:
each key must be a field of its model, each value of the field's type, recursively; then the
client deserialises it and serialises it back unchanged. The resource names are the ones HAMi,
the Ascend device plugin and NVIDIA's DRA driver publish (docs/fleet.md, Sources)."""
import datetime
import json
import os
import re
import subprocess

import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes", reason="kubernetes is not in the interpreter")
from kubernetes.client import ApiClient, models  # noqa: E402

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(SOURCE, "build")
CLI = os.path.join(BUILD, "modelmem")
MODELS = os.path.join(SOURCE, "models")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
# (apiVersion, kind) -> the client's model of that API version.
MODEL_OF = {("v1", "Pod"): "V1Pod", ("apps/v1", "Deployment"): "V1Deployment",
            ("resource.k8s.io/v1", "ResourceClaim"): "ResourceV1ResourceClaim",
            ("resource.k8s.io/v1", "DeviceClass"): "V1DeviceClass"}
PRIMITIVE = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
# Extended resources each scheduler publishes (docs/fleet.md, Sources): HAMi's Ascend and NVIDIA
# names, the Ascend device plugin's static vNPU names.
HAMI = re.compile(r"^(huawei\.com/Ascend(910A|910B[2-4]?|310P)(-memory)?|nvidia\.com/(gpu|gpumem))$")
VNPU = re.compile(r"^huawei\.com/Ascend(910|310P)(-[0-9]+c(\.[0-9]+cpu\.[0-9]+g)?)?$")


def strict(value, type_name, where):
    """value (from YAML) against the client's OpenAPI type `type_name`, unknown keys refused."""
    if type_name.startswith("List["):
        assert isinstance(value, list), f"{where}: not a list"
        for i, item in enumerate(value):
            strict(item, type_name[5:-1], f"{where}[{i}]")
    elif type_name.startswith("Dict["):
        assert isinstance(value, dict), f"{where}: not a mapping"
        inner = type_name[5:-1].split(", ", 1)[1]
        for k, v in value.items():
            assert isinstance(k, str), where
            strict(v, inner, f"{where}.{k}")
    elif type_name in PRIMITIVE:
        assert isinstance(value, PRIMITIVE[type_name]) and not (
            type_name == "int" and isinstance(value, bool)), f"{where}: {value!r} not {type_name}"
    elif type_name in ("datetime", "date"):
        assert isinstance(value, (str, datetime.date)), where
    else:
        cls = getattr(models, type_name)
        assert isinstance(value, dict), f"{where}: not a {type_name}"
        fields = {json_key: attr for attr, json_key in cls.attribute_map.items()}
        for key, item in value.items():
            assert key in fields, f"{where}.{key}: not a field of {type_name}"
            strict(item, cls.openapi_types[fields[key]], f"{where}.{key}")


def typed(obj):
    name = MODEL_OF[(obj["apiVersion"], obj["kind"])]
    strict(obj, name, obj["kind"])
    api = ApiClient()
    model = api.deserialize(json.dumps(obj), name, "application/json")
    assert api.sanitize_for_serialization(model) == obj, obj["kind"]
    return model


def emitted(*args):
    r = subprocess.run([CLI, "place", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    return [d for d in yaml.safe_load_all(r.stdout) if d is not None]


def containers(obj):
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj["spec"]
    return spec.get("containers", [])


@pytest.fixture(scope="module")
def fleet_files():
    if not os.path.exists(CLI):
        pytest.skip(f"{CLI} not built")
    return os.path.join(SOURCE, "examples", "fleet", "models.yaml")


CASES = [
    ("hami", "8x910A", []), ("hami", "8x910A", ["--pods"]), ("hami", "8x64GiB", []),
    ("hami", "8x64GiB", ["--pods"]), ("hami", "8x910B3", []), ("hami", "8x310P", ["--pods"]),
    ("vnpu", "8x910A", []), ("vnpu", "8x910B3", []), ("vnpu", "8x310P", []),
    ("hami", "8x910B2", []), ("vnpu", "8x910B4", []), ("hami", "8x310P3", ["--pods"]),
    ("dra", "8x64GiB", []), ("dra", "8x910A", ["--dra-driver", "npu.example.com"]),
    ("hami", "8x910A", ["--no-templates", "--namespace", "serving"]),
]


@pytest.mark.parametrize("target,devices,extra", CASES)
def test_every_emitted_object_is_typed(fleet_files, target, devices, extra):
    docs = emitted("--models", fleet_files, "--devices", devices, "--emit", target, *extra)
    assert docs
    for obj in docs:
        typed(obj)
        for c in containers(obj):
            for name, quantity in c["resources"].get("limits", {}).items():
                assert QUANTITY.match(quantity), (name, quantity)
                assert (HAMI if target == "hami" else VNPU).match(name), name
            env = {e["name"]: e["value"] for e in c["env"]}
            assert re.fullmatch(r"strategy:caching,pools:\[[a-z0-9-]+:[0-9]+\],default_pool:"
                                r"[a-z0-9-]+", env["MODELMEM_ALLOC_CONF"])
        if obj["kind"] == "ResourceClaim":
            (req,) = obj["spec"]["devices"]["requests"]
            assert QUANTITY.match(req["exactly"]["capacity"]["requests"]["memory"])


def test_an_unknown_field_is_refused(fleet_files):
    # The check itself: a misspelt field anywhere in a real object fails it.
    (obj, *_) = emitted("--models", fleet_files, "--devices", "8x64GiB", "--emit", "dra")
    typed(obj)
    bad = json.loads(json.dumps(obj))
    bad["spec"]["selectors"][0]["cel"]["expresion"] = "true"
    with pytest.raises(AssertionError, match="expresion: not a field of V1CELDeviceSelector"):
        typed(bad)
    pod = emitted(os.path.join(MODELS, "tiny.onnx"), "--dim", "n=64", "--devices", "1x910A", "--emit", "vnpu")[0]
    pod["spec"]["containers"][0]["resources"]["limit"] = {}
    with pytest.raises(AssertionError, match="limit: not a field of V1ResourceRequirements"):
        typed(pod)
