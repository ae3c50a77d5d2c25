"""The kubernetes backend's manifests (BK-6, issue 14) against the published API types.

No Kubernetes API server can run on this machine (Debian 12 packages kubectl 1.20 and etcd, not
kube-apiserver; the Go module proxy, where envtest gets its binaries, is not reachable), so
server-side dry-run is impossible here. What is checked instead: every object that
`sandboxctl manifest kubernetes` prints is walked against the models of the official Python
client (Debian's python3-kubernetes 22.6, generated from the Kubernetes 1.22 OpenAPI spec):
every key must be a field of its type (an unknown or misspelt key fails, which the API server's
strict field validation would also refuse), every value of its type, and the client's own
deserialisation (required fields, enums) must accept it. The checker is shown to catch a
misspelt security field and a wrong type. Requirement IDs: BK-6, FS-1, RES-1..RES-3, EGR-2,
SNAP-5, LC-4 (../shared/design/requirements.md)."""
import copy
import json
import os
import re
import subprocess

import pytest

from conftest import BIN

try:
    from kubernetes import client
except ImportError:  # ci/lib.sh installs it: in CI its absence is a failure, not a skip
    if os.environ.get("CI"):
        raise
    pytest.skip("LOUD SKIP: python3-kubernetes is not installed (apt-get install python3-kubernetes)",
                allow_module_level=True)

MODEL_OF_KIND = {("v1", "Pod"): "V1Pod", ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy"}


def check(obj, type_name, path="$"):
    """Raises AssertionError at the first key or value that the API type does not allow."""
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        assert isinstance(obj, list), f"{path}: expected a list ({type_name})"
        for i, x in enumerate(obj):
            check(x, m.group(1), f"{path}[{i}]")
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        assert isinstance(obj, dict), f"{path}: expected an object ({type_name})"
        for k, v in obj.items():
            assert isinstance(k, str), f"{path}: key {k!r}"
            check(v, m.group(1), f"{path}.{k}")
        return
    if type_name == "str":
        assert isinstance(obj, str), f"{path}: expected a string, got {obj!r}"
    elif type_name == "int":
        assert isinstance(obj, int) and not isinstance(obj, bool), f"{path}: expected an integer, got {obj!r}"
    elif type_name == "bool":
        assert isinstance(obj, bool), f"{path}: expected true/false, got {obj!r}"
    elif type_name == "float":
        assert isinstance(obj, (int, float)) and not isinstance(obj, bool), f"{path}: expected a number"
    elif type_name == "object":
        assert isinstance(obj, (str, int)), f"{path}: expected an int or a string (IntOrString), got {obj!r}"
    else:
        model = getattr(client.models, type_name)
        assert isinstance(obj, dict), f"{path}: expected an object ({type_name})"
        field_of = {wire: attr for attr, wire in model.attribute_map.items()}
        for key, value in obj.items():
            assert key in field_of, f"{path}.{key}: not a field of {type_name}"
            check(value, model.openapi_types[field_of[key]], f"{path}.{key}")


def validate(obj):
    model = MODEL_OF_KIND.get((obj.get("apiVersion"), obj.get("kind")))
    assert model, f"unexpected object {obj.get('apiVersion')}/{obj.get('kind')}"
    check(obj, model)
    # The client's own deserialisation: required fields and enums (it raises ValueError).
    client.ApiClient()._ApiClient__deserialize(copy.deepcopy(obj), model)
    return model


def manifests(*args):
    out = subprocess.run([str(BIN / "sandboxctl"), "manifest", "kubernetes", *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    return doc["items"]


CASES = {
    "untrusted, the six tasks' limits and policy": [
        "--trust", "untrusted", "--cpu", "500m", "--memory", "256Mi", "--disk", "32Mi",
        "--allow", "http://pkg-mirror.demo-tools.svc.cluster.local:80", "--env", "LANG=C",
        "--secret", "TOKEN=s-never-in-a-manifest", "--tenant", "alice"],
    "first party, defaults, no egress": ["--trust", "first_party"],
    "verified on a microvm floor, two ports, own image": [
        "--trust", "verified", "--microvm-floor", "--allow", "tls://api.example.org:443",
        "--allow", "http://mirror.internal:8080", "--image", "sandbox=registry.local/tools:1",
        "--namespace", "tenant-alice", "--sandbox-id", "sb9f8e7d6c5b", "--runtime-id", "4242-a1b2c3"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_manifest_is_a_valid_object_of_its_type(name):
    items = manifests(*CASES[name])
    kinds = [validate(o) for o in items]
    assert kinds == ["V1NetworkPolicy", "V1Pod"]
    pod = items[1]
    c = pod["spec"]["containers"][0]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "s-never-in-a-manifest" not in json.dumps(items)


def test_the_trust_class_picks_the_runtime_class():
    assert manifests("--trust", "untrusted")[1]["spec"]["runtimeClassName"] == "gvisor"
    assert manifests("--trust", "unverified")[1]["spec"]["runtimeClassName"] == "gvisor"
    assert "runtimeClassName" not in manifests("--trust", "verified")[1]["spec"]
    assert manifests("--trust", "untrusted", "--microvm-floor")[1]["spec"]["runtimeClassName"] == "kata"


def test_the_checker_catches_what_the_api_server_would_refuse():
    pod = manifests("--trust", "untrusted")[1]
    misspelt = copy.deepcopy(pod)
    misspelt["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalaton"] = False
    with pytest.raises(AssertionError, match="allowPrivilegeEscalaton: not a field of V1SecurityContext"):
        validate(misspelt)
    wrong_type = copy.deepcopy(pod)
    wrong_type["spec"]["automountServiceAccountToken"] = "false"
    with pytest.raises(AssertionError, match="automountServiceAccountToken: expected true/false"):
        validate(wrong_type)
    no_name = copy.deepcopy(pod)
    del no_name["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError):
        validate(no_name)


def test_bad_options_exit_2_with_the_reason():
    out = subprocess.run([str(BIN / "sandboxctl"), "manifest", "kubernetes", "--template", "nope"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "template 'nope'" in out.stderr, out
    out = subprocess.run([str(BIN / "sandboxctl"), "manifest", "kubernetes", "--sandbox-id", "Bad_ID"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "Kubernetes object name" in out.stderr, out
