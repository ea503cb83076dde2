"""The `ray up` cluster files in clusters/: each is checked the way `ray up` checks it before it
contacts a cloud (Ray's `prepare_config`, then `validate_config` against Ray's own
ray-schema.json), then for what rlsys needs from a cluster. Offline: no credentials, no network."""

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"
FILES = sorted(CLUSTERS.glob("*.yaml"))
ROLES = ("learner", "browser", "android")
TORCH_PIN = "torch==2.13.0"
RAY_SCHEMA = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
PACKAGE_INSTALL = re.compile(r"pip install\b[^\n]*\s-e\s[^\n]*rlsys")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def prepared(raw: dict) -> dict:
    """What `ray up` works from: defaults filled in, setup commands merged, node types resolved."""
    return prepare_config(copy.deepcopy(raw))


def setups(cfg: dict) -> dict[str, list[str]]:
    """The setup commands each node type really runs: the head's merged list; for a worker type its own
    `worker_setup_commands` when it has them (they replace the shared ones), else the merged list."""
    out = {}
    for name, node_type in cfg["available_node_types"].items():
        if name == cfg["head_node_type"]:
            out[name] = cfg["head_setup_commands"]
        else:
            out[name] = node_type.get("worker_setup_commands", cfg["worker_setup_commands"])
    if cfg["provider"]["type"] == "local":  # one node type for the head and every worker
        out = {"head": cfg["head_setup_commands"], "workers": cfg["worker_setup_commands"]}
    return out


def start_resources(commands: list[str]) -> dict[str, int]:
    """Custom resources named by JSON objects in `ray start` commands (the local provider's only way)."""
    found = {}
    for command in commands:
        if "ray start" not in command:
            continue
        for obj in re.findall(r"\{[^{}]*\}", command):
            try:
                found.update(json.loads(obj))
            except json.JSONDecodeError:
                continue
    return found


def resources_by_role(cfg: dict) -> dict[str, list[str]]:
    """resource name -> where it is declared (node type names, or head / workers start commands)."""
    where: dict[str, list[str]] = {}
    if cfg["provider"]["type"] == "local":
        for label, key in (("head", "head_start_ray_commands"), ("workers", "worker_start_ray_commands")):
            for name in start_resources(cfg[key]):
                where.setdefault(name, []).append(label)
    else:
        for type_name, node_type in cfg["available_node_types"].items():
            for name in node_type["resources"]:
                where.setdefault(name, []).append(type_name)
    return where


def all_commands(cfg: dict) -> list[str]:
    commands = []
    for key in (
        "initialization_commands",
        "setup_commands",
        "head_setup_commands",
        "worker_setup_commands",
        "head_start_ray_commands",
        "worker_start_ray_commands",
    ):
        commands += cfg.get(key, [])
    for node_type in cfg.get("available_node_types", {}).values():
        commands += node_type.get("worker_setup_commands", []) + node_type.get("initialization_commands", [])
    return commands


def test_cluster_files_are_found():
    names = {path.name for path in FILES}
    assert {"aws.yaml", "gcp.yaml", "local.yaml"} <= names, names


@pytest.fixture(params=FILES, ids=lambda path: path.name)
def cluster(request):
    raw = load(request.param)
    return request.param, raw, prepared(raw)


def test_valid_against_rays_schema(cluster):
    path, raw, cfg = cluster
    validate_config(cfg)  # raises on anything ray-schema.json (or Ray's extra checks) rejects
    jsonschema.validate(raw, RAY_SCHEMA)  # the file as written, before Ray fills in its defaults


def test_declares_the_three_roles(cluster):
    path, raw, cfg = cluster
    where = resources_by_role(cfg)
    for role in ROLES:
        assert where.get(role), f"{path.name}: no node type or start command declares the {role!r} resource"
    if cfg["provider"]["type"] == "local":
        assert "learner" in start_resources(cfg["head_start_ray_commands"])
    else:
        head = cfg["available_node_types"][cfg["head_node_type"]]
        assert head["resources"].get("learner", 0) >= 1 and head["resources"].get("GPU", 0) >= 1
        for name, node_type in cfg["available_node_types"].items():
            assert node_type["resources"].get("CPU", 0) >= 1, f"{path.name}: {name} declares no CPU"
            roles = [role for role in ROLES if role in node_type["resources"]]
            assert len(roles) == 1, f"{path.name}: {name} should serve exactly one role, has {roles}"


def test_worker_counts_are_consistent(cluster):
    path, raw, cfg = cluster
    if cfg["provider"]["type"] == "local":  # one node type; Ray caps max_workers at the number of worker_ips
        assert 1 <= cfg["max_workers"] <= len(raw["provider"]["worker_ips"])
        assert raw["provider"]["head_ip"] not in raw["provider"]["worker_ips"]
        return
    workers = [t for name, t in cfg["available_node_types"].items() if name != cfg["head_node_type"]]
    assert len(workers) >= 2
    assert cfg["available_node_types"][cfg["head_node_type"]]["max_workers"] == 0
    for node_type in workers:
        assert 0 <= node_type["min_workers"] <= node_type["max_workers"] <= cfg["max_workers"]
    assert sum(t["min_workers"] for t in workers) <= cfg["max_workers"]


def test_every_node_installs_the_package_and_pinned_torch(cluster):
    path, raw, cfg = cluster
    for node, commands in setups(cfg).items():
        text = "\n".join(commands)
        package = PACKAGE_INSTALL.search(text)
        assert package, f"{path.name}: {node} does not install rlsys"
        assert TORCH_PIN in text, f"{path.name}: {node} does not install {TORCH_PIN}"
        assert text.index(TORCH_PIN) < package.start(), f"{path.name}: {node} installs rlsys before pinning torch"
    assert raw.get("file_mounts", {}).get("~/rlsys"), f"{path.name}: the repository is not mounted at ~/rlsys"


def test_torch_is_pinned_wherever_it_is_installed(cluster):
    path, raw, cfg = cluster
    text = path.read_text()
    assert "torchvision" not in text and "torchaudio" not in text
    for command in all_commands(raw):
        if not re.search(r"\bpip3? install\b", command):
            continue
        for spec in re.findall(r"(?<![\w./-])torch\b[^\s\"']*", command):
            assert spec == TORCH_PIN, f"{path.name}: unpinned torch {spec!r} in {command!r}"


def test_browser_nodes_get_chromium_and_chromedriver(cluster):
    path, raw, cfg = cluster
    if cfg["provider"]["type"] == "local":
        nodes = ["workers"]
    else:
        nodes = [name for name, t in cfg["available_node_types"].items() if "browser" in t["resources"]]
    assert nodes
    for node in nodes:
        text = "\n".join(setups(cfg)[node])
        assert "apt-get" in text and "chromium" in text and "chromedriver" in text, f"{path.name}: {node}"
        # both distributions' package names: Debian's chromium-driver, Ubuntu's chromium-chromedriver
        assert "chromium-driver" in text and "chromium-chromedriver" in text


def test_android_nodes_get_the_sdk_and_kvm(cluster):
    path, raw, cfg = cluster
    if cfg["provider"]["type"] == "local":  # existing machines: the file points to the SDK and AVD steps instead
        assert "Creating the AVD and its snapshot" in path.read_text()
        return
    for name, node_type in cfg["available_node_types"].items():
        text = "\n".join(setups(cfg)[name])
        if "android" in node_type["resources"]:
            assert "worker_setup_commands" in node_type, f"{path.name}: {name} has no per-type setup"
            for needed in ("sdkmanager", '"emulator"', '"platform-tools"', "system-images;", "x86_64", "/dev/kvm"):
                assert needed in text, f"{path.name}: {name} setup lacks {needed}"
        else:
            assert "sdkmanager" not in text, f"{path.name}: {name} installs the Android SDK for nothing"
    if cfg["provider"]["type"] == "gcp":
        android = [t for t in cfg["available_node_types"].values() if "android" in t["resources"]]
        assert all(t["node_config"]["advancedMachineFeatures"]["enableNestedVirtualization"] for t in android)
    if cfg["provider"]["type"] == "aws":
        android = [t for t in cfg["available_node_types"].values() if "android" in t["resources"]]
        assert all(t["node_config"]["InstanceType"].endswith(".metal") for t in android)


def test_dashboard_is_bound_to_localhost(cluster):
    path, raw, cfg = cluster
    head = [c for c in raw["head_start_ray_commands"] if "ray start" in c]
    assert len(head) == 1
    assert "--head" in head[0] and "--dashboard-host=127.0.0.1" in head[0]
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head[0]
    workers = [c for c in raw["worker_start_ray_commands"] if "ray start" in c]
    assert len(workers) == 1 and "--address=$RAY_HEAD_IP:6379" in workers[0]
    assert "0.0.0.0" not in path.read_text()


def test_every_node_starts_with_token_authentication(cluster):
    """Cluster nodes listen on their network address: each starts with Ray's token auth on (a missing
    token then stops `ray start` instead of generating one the other nodes do not hold), and the
    token the user generated is copied to every node."""
    path, raw, cfg = cluster
    starts = [
        c for key in ("head_start_ray_commands", "worker_start_ray_commands") for c in raw[key] if "ray start" in c
    ]
    assert len(starts) == 2
    for command in starts:
        assert re.search(r"RAY_AUTH_MODE=token\s+ray start", command), command
    assert raw["file_mounts"].get("~/.ray/auth_token") == "~/.ray/auth_token"
    assert "RAY_AUTH_MODE=disabled" not in path.read_text()


def test_no_secrets_or_local_paths(cluster):
    path, raw, cfg = cluster
    text = path.read_text()
    assert not re.search(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b", text), "an AWS access key id"
    assert not re.search(r"(?i)aws_(secret_access_key|session_token)|secret_key|password\s*[:=]", text)
    assert "PRIVATE KEY" not in text and "gcp_credentials" not in text
    assert "ssh_private_key" not in raw.get("auth", {}) or raw["auth"]["ssh_private_key"].startswith("~")
    assert not re.search(r"(?m)^[^#]*(/root/|/Users/)", text), "an absolute path of one machine"


def test_validator_rejects_a_misspelled_key():
    raw = load(CLUSTERS / "aws.yaml")
    raw["max_worker"] = raw.pop("max_workers")
    with pytest.raises(jsonschema.ValidationError, match="max_worker"):
        validate_config(prepared(raw))


def test_validator_rejects_wrong_types():
    raw = load(CLUSTERS / "gcp.yaml")
    raw["available_node_types"]["browser_cpu"]["resources"]["browser"] = 0.5  # resources are integers
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepared(raw))
    raw = load(CLUSTERS / "aws.yaml")
    raw["head_start_ray_commands"] = "ray start --head"  # a list of commands, not a string
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepared(raw))


def test_validator_rejects_an_unknown_head_type_and_too_few_max_workers():
    raw = load(CLUSTERS / "aws.yaml")
    raw["head_node_type"] = "no_such_type"
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(prepared(raw))
    raw = load(CLUSTERS / "aws.yaml")
    raw["available_node_types"]["browser_cpu"]["min_workers"] = raw["max_workers"] + 1
    with pytest.raises(ValueError, match="min_workers"):
        validate_config(prepared(raw))
