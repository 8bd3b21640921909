"""`modelmem place --emit ray` on a real Ray cluster (127.0.0.1 only), walked as a user walks it
with Ray's public commands: the emitted config is written to a file, the emitted `# ray-start`
line is run as `place` printed it (plus only what a loopback test needs: the node's address,
free ports, a short temp dir, the CPUs) to start a local head declaring the devices (a custom
resource per device, in MiB), `serve deploy FILE --address DASHBOARD` deploys the config, and a
driver connected by `ray.init(address=...)` reads Ray's state API and Serve's public API. Ray's
scheduler puts every replica on the device `place` chose, each replica serves one PyTorch
inference on the CPU with modelmem as its allocator under the pool string `place` gave it (one
of them through Serve's HTTP proxy too), and one replica more than `place` says fits stays
pending, on the device and by the shortfall `place` named. The test then ends the cluster
whatever happened, bounded, by its processes' ids (SIGTERM, then SIGKILL, as `ray stop --force`
does by name to every Ray process of the machine, other tests' included), and none is left."""
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

# Ray 2.60 turns token authentication on for `ray start` when a token exists (~/.ray/auth_token,
# made by an earlier `ray.init()`), and `serve deploy` sends one only in token mode: the test's
# cluster, its commands and its driver use a token of their own, set before ray is imported,
# whatever this machine's home holds.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
os.environ.pop("RAY_AUTH_TOKEN_PATH", None)

ray = pytest.importorskip("ray", reason="ray is not in the interpreter (scripts/setup --runtimes)")
pytest.importorskip("ray.serve", reason="ray[serve] is not installed")
pytest.importorskip("torchvision", reason="torchvision is not installed")

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(SOURCE, "build")
CLI = os.path.join(BUILD, "modelmem")
BIN = os.path.dirname(sys.executable)  # the interpreter's `ray` and `serve` commands
MODEL = os.path.join(SOURCE, "models", "resnet50.onnx")
# resnet50, eager, batch 1 on two cpu budgets of 256 MiB, replicas allowed to share a device:
# one replica fits a device (its need is 164 MiB), two do not.
PLACE = [MODEL, "--dim", "batch=1", "--runtime", "eager", "--no-spread",
         "--devices", "2x256MiB:cpu"]
DEADLINE_S = 200


def place(*args, code=0):
    r = subprocess.run([CLI, "place", *PLACE, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == code, r.stderr + r.stdout
    return r.stdout


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Deadline(Exception):
    pass


def on_alarm(signum, frame):
    raise Deadline(f"the Ray journey took more than {DEADLINE_S} s")


def wait_for(what, predicate, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s")


def run(argv, env, timeout):
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{shlex.join(argv)}: exit {r.returncode}\n{r.stdout}{r.stderr}"
    return r.stdout


def ray_start(text, temp, env, ports):
    """The emitted `ray start` line, executed: parsed as a shell would, its words kept, the loopback
    options a test on a shared machine needs appended (free ports instead of Ray's fixed ones)."""
    lines = re.findall(r"^# ray-start \(this node\): (.*)$", text, re.M)
    assert len(lines) == 1, text
    argv = shlex.split(lines[0])
    assert argv[:3] == ["ray", "start", "--head"], argv
    gcs, dashboard, agent, client, metrics = ports
    loopback = [
        "--node-ip-address=127.0.0.1", f"--port={gcs}", "--include-dashboard=true",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
        f"--dashboard-agent-listen-port={agent}", f"--ray-client-server-port={client}",
        f"--metrics-export-port={metrics}", f"--temp-dir={temp}", "--num-cpus=4",
        "--num-gpus=0", "--disable-usage-stats"]
    print(f"\n$ {lines[0]} {shlex.join(loopback)}")
    run([os.path.join(BIN, "ray")] + argv[1:] + loopback, env, 90)
    return f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dashboard}"


def cluster_processes(temp, gcs, name=""):
    """This cluster's own processes (its raylet, GCS, dashboard, agents, client server...): each
    names its session directory, under the test's temp dir, or its GCS port on its command line.
    Other Ray clusters on the machine are not this test's to touch."""
    if name:
        patterns = [f"{name}.*{temp}"]
    else:
        patterns = [temp, f"[:=]{gcs}( |$)"]
    pids = set()
    for pattern in patterns:
        r = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
        pids |= {int(p) for p in r.stdout.split()}
    return pids


def cluster_tree(temp, gcs):
    """The cluster's processes and all their descendants: Ray's workers (the Serve controller,
    proxy and replicas) rename themselves `ray::...` and name neither, but the raylet started
    them."""
    pids, new = set(), cluster_processes(temp, gcs)
    while new:
        pids |= new
        r = subprocess.run(["pgrep", "-P", ",".join(map(str, new))], capture_output=True,
                           text=True)
        new = {int(p) for p in r.stdout.split()} - pids
    return pids


def alive(pids):
    left = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:  # a zombie has stopped: only its entry is left
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    left.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return left


def stop_cluster(temp, gcs, grace=10):
    """Ends this cluster by its processes' ids, as `ray stop` does by their names (SIGTERM, then
    SIGKILL what is left after the grace), but only this cluster's; returns what it ended and
    what is still alive after both."""
    ours = cluster_tree(temp, gcs)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive(ours):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace
        while alive(ours) and time.monotonic() < end:
            time.sleep(0.2)
        ours |= cluster_tree(temp, gcs)  # any the raylet started meanwhile
    return ours, alive(ours)


def test_ray_schedules_every_replica_where_place_put_it():
    if not os.path.exists(CLI):
        pytest.skip(f"{CLI} not built")
    # What place says: 2 replicas fit, one per device; a third does not, and where it is short.
    report = place("--replicas", "2")
    assert "fits           yes: 2 replicas on 2 of 2 devices" in report
    over = place("--replicas", "3", code=1)
    m = re.search(r"does not fit   (resnet50-2) needs ([0-9]+) MiB: no device has room; the most "
                  r"is ([0-9]+) MiB on ([0-9]+), short by ([0-9]+) MiB", over)
    assert m, over
    extra, need_mib, left_mib, short_dev, short_mib = m[1], int(m[2]), int(m[3]), m[4], int(m[5])
    assert need_mib - left_mib == short_mib

    text = place("--replicas", "2", "--emit", "ray", "--ray-app", "fleet_ray_app:build")
    config = yaml.safe_load(text)
    starts = re.findall(r"^# ray-start .*--head --resources='(\{.*\})'$", text, re.M)
    assert len(starts) == 1, text
    resources = json.loads(starts[0])
    assert resources == {"modelmem_mib_0": 256, "modelmem_mib_1": 256}
    planned = {}  # replica -> (device resource, MiB, pool string)
    for line in re.findall(r"^# (resnet50-[0-9]+) on device ([0-9]+) \(cpu\).*request ([0-9]+) MiB",
                           text, re.M):
        planned[line[0]] = (f"modelmem_mib_{line[1]}", int(line[2]))
    assert sorted(planned) == ["resnet50-0", "resnet50-1"]
    assert {d for d, _ in planned.values()} == {"modelmem_mib_0", "modelmem_mib_1"}
    confs = {}
    for app in config["applications"]:
        (dep,) = app["deployments"]
        options = dep["ray_actor_options"]
        assert options["resources"] == {planned[app["name"]][0]: planned[app["name"]][1]}
        confs[app["name"]] = options["runtime_env"]["env_vars"]["MODELMEM_ALLOC_CONF"]
        # MKL's own cache of GEMM buffers off, as `modelmem run` has it: the pool holds them.
        assert options["runtime_env"]["env_vars"]["MKL_DISABLE_FAST_MM"] == "1", options
    assert set(confs.values()) == {
        f"strategy:caching,pools:[resnet50:{need_mib}],default_pool:resnet50"}
    # Serve's HTTP proxy where the config says, on every node; here on loopback, at a free port.
    assert config["proxy_location"] == "EveryNode", config
    assert config["http_options"] == {"host": "0.0.0.0", "port": 8000}, config
    (http_port,) = free_ports(1)
    config["http_options"] = {"host": "127.0.0.1", "port": http_port}

    # The replica place could not fit, asked of Ray as place would have: on the device it named.
    spare = json.loads(json.dumps(config["applications"][0]))
    spare["name"], spare["route_prefix"] = extra, "/" + extra
    spare["args"]["replica"], spare["args"]["device"] = extra, short_dev
    spare["deployments"][0]["ray_actor_options"]["resources"] = {
        f"modelmem_mib_{short_dev}": need_mib}
    grown = dict(config, applications=config["applications"] + [spare])

    from ray import serve
    from ray.util.state import list_actors

    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # unix sockets: keep the path short
    files = {}
    for name, conf in (("placed", config), ("grown", grown)):
        files[name] = os.path.join(temp, f"{name}.yaml")
        with open(files[name], "w") as f:
            yaml.safe_dump(conf, f, sort_keys=False)
    # The cluster's processes (the controller, the replicas) import the application builder and
    # modelmem from here; Ray's telemetry off.
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(__file__), os.path.join(BUILD, "python")]))
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(DEADLINE_S)
    started = time.monotonic()
    passed = False
    ports = free_ports(5)
    gcs = ports[0]
    try:
        address, dashboard = ray_start(text, os.path.join(temp, "r"), env, ports)
        serve_deploy = [os.path.join(BIN, "serve"), "deploy", "--address", dashboard]
        assert cluster_processes(temp, gcs, "raylet"), "no raylet names the cluster's dir"
        run(serve_deploy + [files["placed"]], env, 60)
        print(f"$ serve deploy --address {dashboard} placed.yaml")
        ray.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False)

        def running():
            apps = serve.status().applications
            return all(apps.get(n) is not None and apps[n].status == "RUNNING" for n in planned)
        wait_for("the placed replicas running", running, 150)
        # Then the replica more: the same config with it added (the placed ones are unchanged).
        run(serve_deploy + [files["grown"]], env, 60)
        print(f"$ serve deploy --address {dashboard} grown.yaml  # {extra} added")

        answers = {}
        for name in planned:
            answers[name] = serve.get_app_handle(name).remote().result(timeout_s=60)
        # The replicas' processes are the cluster's: the stop below must end them too.
        assert {a["pid"] for a in answers.values()} <= cluster_tree(temp, gcs), answers
        # Eight times the batch place sized for is refused inside the replica's pool.
        over = serve.get_app_handle("resnet50-0").remote(8).result(timeout_s=60)
        assert "refused" in over and over["ooms"] >= 1, over
        print(f"resnet50-0 at batch 8: refused inside its pool: {over['refused'][:160]}")
        # And one request through Serve's HTTP proxy, at the route the config gave the replica.
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/resnet50-1", timeout=60) as r:
            http = json.load(r)
        assert http["replica"] == "resnet50-1" and http["shape"] == [1, 1000], http
        assert http["actor_id"] == answers["resnet50-1"]["actor_id"], http

        def replica_actors():
            actors = [a for a in list_actors(address=dashboard, detail=True, limit=1000)
                      if a.class_name.startswith("ServeReplica:") and a.state != "DEAD"]
            return actors if len(actors) == 3 else None
        actors = wait_for("three replica actors", replica_actors, 30)
        by_app = {a.class_name.split(":")[1]: a for a in actors}
        available = ray.available_resources()
        print(f"Ray cluster {resources}; available after the deploy: "
              f"{ {k: v for k, v in available.items() if k.startswith('modelmem')} }")
        for name, (resource, mib) in planned.items():
            actor = by_app[name]
            # Ray's scheduler holds the replica on the device place chose, by the MiB it asked.
            assert actor.state == "ALIVE", actor
            assert actor.required_resources.get(resource) == mib, actor.required_resources
            a = answers[name]
            assert a["actor_id"] == actor.actor_id
            assert a["replica"] == name and a["shape"] == [1, 1000]
            assert a["conf"] == confs[name] and "resnet50" in a["describe"], a
            assert a["mkl_fast_mm"] == "1", a  # the replica's process started with it
            assert a["ooms"] == 0 and a["peak_reserved"] <= need_mib * 2**20, a
            print(f"{name}: actor {actor.actor_id[:8]} pid {a['pid']} {actor.state} on "
                  f"{resource}={mib}; pool {a['conf']}; peak reserved "
                  f"{a['peak_reserved'] / 2**20:.1f} MiB, allocated "
                  f"{a['peak_allocated'] / 2**20:.1f} MiB, 0 refused; output {a['shape']}")
        print(f"resnet50-1 over HTTP (GET /resnet50-1 on 127.0.0.1:{http_port}): same actor, "
              f"output {http['shape']}")
        # The replica place said does not fit stays pending, short by place's figure.
        pending = by_app[extra]
        assert pending.state == "PENDING_CREATION", pending
        left = available.get(f"modelmem_mib_{short_dev}", 0)
        assert available.get("CPU", 0) >= 1, available  # pending for the MiB, nothing else
        assert left == left_mib and need_mib - left == short_mib, available
        print(f"{extra}: {pending.state}, asks modelmem_mib_{short_dev}={need_mib}, Ray has "
              f"{left:g} left: short by {need_mib - left:g} MiB (place: {short_mib})")
        print(f"journey {time.monotonic() - started:.1f} s")
        passed = True
    finally:
        signal.alarm(0)
        try:
            ray.shutdown()
        finally:
            # Only this cluster's processes, by their ids: `ray stop --force`, a user's stop,
            # ends every Ray process of the machine, other tests' and other users' included.
            ours, left_over = stop_cluster(temp, gcs)
            if passed:
                shutil.rmtree(temp, ignore_errors=True)
            else:
                print(f"Ray's logs: {temp}")
        assert not left_over, f"processes of the cluster left after the stop: {left_over}"
        print(f"stopped: the cluster's {len(ours)} processes (replicas included), none left")

