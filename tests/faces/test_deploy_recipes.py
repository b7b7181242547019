"""The recipes for where users run Ray, checked without a cluster (docs/kuberay-and-slurm.md).

``deploy/kuberay/rayjob.yaml`` is validated against the RayJob CRD of the KubeRay release it targets
(``deploy/kuberay/crd/``, vendored unchanged) the way the API server's strict field validation, kubectl's
default, checks it: a misspelt field anywhere fails, naming it. ``deploy/slurm/cbs-ray.sbatch`` runs through
bash with ``srun`` and ``scontrol`` stubbed, and the command it hands ``srun`` is read back. Both recipes'
``cbs-ray search ...`` commands go through the real search parser (its parse step only) and load as specs.
"""

import copy
import os
import shlex
import subprocess

import pytest
import yaml
from jsonschema import Draft4Validator

from cbs_ray import cli
from cbs_ray.spec.load import load_spec
from helpers.paths import ROOT

RAYJOB = ROOT / "deploy" / "kuberay" / "rayjob.yaml"
CRD = ROOT / "deploy" / "kuberay" / "crd" / "ray.io_rayjobs.yaml"
SBATCH = ROOT / "deploy" / "slurm" / "cbs-ray.sbatch"
CLUSTER = ROOT / "cluster.yaml"

# libyaml reads the 1.4 MB CRD in under a second; the pure-Python loader is many times slower.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# ---- the strict schema ------------------------------------------------------------------------------------

def strict(schema: dict) -> dict:
    """A copy of a CRD's OpenAPI v3 schema that refuses what the API server refuses under strict field
    validation. JSON Schema lets an object carry fields its ``properties`` do not name; Kubernetes rejects
    them unless the object says ``x-kubernetes-preserve-unknown-fields: true``, so every such object gets
    ``additionalProperties: false``. ``x-kubernetes-int-or-string`` (quantities, ports) takes an int or a
    string: KubeRay's CRD spells that ``anyOf``, and one that does not gets it."""
    out = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: strict(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = strict(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [strict(sub) for sub in value]
        else:
            out[key] = value
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    if out.get("x-kubernetes-int-or-string") and "type" not in out and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def field_path(parts) -> str:
    """``spec.rayClusterSpec.workerGroupSpecs[0].template``: a place in a manifest as kubectl prints it."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text or "(the document)"


def field_errors(validator: Draft4Validator, doc: dict) -> list[str]:
    """Every way ``doc`` breaks the schema, as ``path: message``."""
    return sorted(f"{field_path(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc))


@pytest.fixture(scope="module")
def rayjob_schema() -> Draft4Validator:
    crd = yaml.load(CRD.read_text(), Loader=_LOADER)
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    # OpenAPI v3.0's schema object is JSON Schema draft 4 plus Kubernetes' x- keys (which a validator ignores).
    return Draft4Validator(strict(v1["schema"]["openAPIV3Schema"]))


def test_the_crd_is_the_vendored_kuberay_release():
    first = CRD.read_text().splitlines()[0]
    assert first.startswith("# Source: github.com/ray-project/kuberay, tag v1.7.0 (commit 59d663a"), first


def test_strict_refuses_an_unknown_field_unless_the_schema_preserves_them():
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}},
                                               "free": {"type": "object", "properties": {},
                                                        "x-kubernetes-preserve-unknown-fields": True},
                                               "port": {"x-kubernetes-int-or-string": True}}}
    validator = Draft4Validator(strict(schema))
    assert field_errors(validator, {"a": {"b": "x"}, "free": {"anything": 1}, "port": 8265}) == []
    assert field_errors(validator, {"port": "dashboard"}) == []
    unexpected = "a: Additional properties are not allowed ('bb' was unexpected)"
    assert field_errors(validator, {"a": {"bb": "x"}}) == [unexpected]
    assert field_errors(validator, {"port": 1.5}) != []


# ---- the RayJob ------------------------------------------------------------------------------------------

def manifests() -> dict:
    """The documents of rayjob.yaml by kind."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all(RAYJOB.read_text()) if doc}


def rayjob() -> dict:
    return manifests()["RayJob"]


def pod_specs(job: dict) -> dict:
    """The pod spec of the head group and of each worker group, by group name."""
    cluster = job["spec"]["rayClusterSpec"]
    pods = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    pods.update({group["groupName"]: group["template"]["spec"] for group in cluster["workerGroupSpecs"]})
    return pods


def parse_cbs_ray_search(argv: list[str]):
    """``cbs-ray search ARGS`` through the parse step of the command the console script runs for it (the
    search itself is not called)."""
    assert argv[:2] == ["cbs-ray", "search"], argv
    assert cli.COMMANDS["search"] is cli.search_main  # which parses with parse_search_args
    return cli.parse_search_args(argv[2:], prog="cbs-ray search")


def test_the_rayjob_passes_the_crds_strict_schema(rayjob_schema):
    job = rayjob()
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert field_errors(rayjob_schema, job) == []


@pytest.mark.parametrize("where, field, typo", [
    (["spec"], "shutdownAfterJobFinishes", "shutdownAfterJobFinishe"),
    (["spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec", "containers", 0], "resources",
     "resourcess"),
    (["spec", "rayClusterSpec", "authOptions"], "mode", "mdoe"),
])
def test_a_misspelt_field_fails_naming_it(rayjob_schema, where, field, typo):
    job = copy.deepcopy(rayjob())
    place = job
    for part in where:
        place = place[part]
    place[typo] = place.pop(field)
    assert field_errors(rayjob_schema, job) == [
        f"{field_path(where)}: Additional properties are not allowed ('{typo}' was unexpected)"]


def test_a_wrong_value_fails_too(rayjob_schema):
    job = copy.deepcopy(rayjob())
    job["spec"]["rayClusterSpec"]["authOptions"]["mode"] = "tokens"
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # must be quoted: "0"
    errors = field_errors(rayjob_schema, job)
    assert len(errors) == 2, errors
    assert errors[0].startswith("spec.rayClusterSpec.authOptions.mode: 'tokens' is not one of"), errors
    assert errors[1] == "spec.rayClusterSpec.headGroupSpec.rayStartParams.num-cpus: 0 is not of type 'string'"


def test_the_rayjob_uses_token_auth_and_deletes_its_cluster_when_done():
    spec = rayjob()["spec"]
    assert spec["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    # KubeRay's controller (utils/validation.go, not the CRD) refuses token mode below Ray 2.52.
    assert tuple(int(n) for n in spec["rayClusterSpec"]["rayVersion"].split(".")) >= (2, 52)
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] > 0  # the window to kubectl cp the report off the head


def test_the_entrypoint_parses_with_the_search_parser_and_loads_as_a_spec():
    args = parse_cbs_ray_search(shlex.split(rayjob()["spec"]["entrypoint"]))
    assert args.address == "auto"  # the RayJob's own cluster
    spec = load_spec(ROOT / args.space, args.overrides)  # the working_dir is this repository's root
    assert spec.storage_path == "/mnt/cbs-ray/storage"
    assert args.output == "/mnt/cbs-ray/results/sst2-bert-base"


def test_a_misspelt_flag_in_the_entrypoint_fails_to_parse():
    argv = shlex.split(rayjob()["spec"]["entrypoint"].replace("--address", "--adress"))
    with pytest.raises(SystemExit) as exit_:
        parse_cbs_ray_search(argv)
    assert exit_.value.code == 2


def test_the_experiment_lives_on_one_readwritemany_claim_mounted_alike_on_every_node():
    docs = manifests()
    claim = docs["PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    mount_paths = set()
    for group, pod in pod_specs(docs["RayJob"]).items():
        (volume,) = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], group
        (container,) = pod["containers"]
        mount_paths |= {m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume["name"]}
    assert mount_paths == {"/mnt/cbs-ray"}  # one path on the head and on every worker
    args = parse_cbs_ray_search(shlex.split(docs["RayJob"]["spec"]["entrypoint"]))
    storage = [o.split("=", 1)[1] for o in args.overrides if o.startswith("storage_path=")]
    assert storage and storage[0].startswith("/mnt/cbs-ray/") and args.output.startswith("/mnt/cbs-ray/")


def test_a_cpu_head_and_gpu_workers_on_cluster_yamls_image():
    image = yaml.safe_load(CLUSTER.read_text())["docker"]["image"]
    job = rayjob()
    cluster = job["spec"]["rayClusterSpec"]
    assert image.startswith(f"rayproject/ray:{cluster['rayVersion']}-")
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # as cluster.yaml: no trial on the head
    for group, pod in pod_specs(job).items():
        (container,) = pod["containers"]
        assert container["image"] == image, group
        gpus = container["resources"]["limits"].get("nvidia.com/gpu", 0)
        assert (gpus == 0) if group == "head" else (gpus >= 1), (group, gpus)
        assert container["resources"]["requests"].get("nvidia.com/gpu", 0) == gpus, group  # Kubernetes: equal


def test_the_runtime_env_is_one_ray_accepts():
    from ray.runtime_env import RuntimeEnv  # imports Ray (a second), starts nothing

    env = yaml.safe_load(rayjob()["spec"]["runtimeEnvYAML"])
    assert set(env) == {"working_dir", "pip"}  # Ray ignores a field it does not know: check the names here
    RuntimeEnv(**env)  # raises on a working_dir URI or pip list Ray would refuse
    (package,) = env["pip"]
    assert package == f"cbs-ray @ {env['working_dir']}"  # the command and the search spaces from one archive


# ---- the SLURM script ------------------------------------------------------------------------------------

def sbatch_directives() -> dict:
    lines = [line.split(None, 1)[1] for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH ")]
    return dict((line.split("=", 1) + [""])[:2] for line in (line.split("#")[0].strip() for line in lines))


def run_sbatch(tmp_path, script=SBATCH, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the batch script as SLURM would on the first of two nodes, with ``srun`` and ``scontrol`` stubbed:
    the result and the argv the script handed ``srun``."""
    bin_dir, home, shared = tmp_path / "bin", tmp_path / "home", tmp_path / "shared"
    for folder in (bin_dir, home / ".ray", shared / "cbs-ray-venv" / "bin"):
        folder.mkdir(parents=True, exist_ok=True)
    (home / ".ray" / "auth_token").write_text("a-test-token")
    (shared / "cbs-ray-venv" / "bin" / "activate").write_text("")
    argv_file = tmp_path / "srun.argv"
    stubs = {"srun": f"printf '%s\\0' \"$@\" > {shlex.quote(str(argv_file))}",
             "scontrol": "printf 'node1\\nnode2\\n'"}
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    base = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(home), "SHARED": str(shared),
            "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_PER_NODE": "a100:4",
            "SLURM_CPUS_ON_NODE": "64"}
    done = subprocess.run(["bash", str(script)], cwd=ROOT, env={**base, **env}, capture_output=True, text=True,
                          timeout=30, check=False)
    argv = argv_file.read_text().split("\0")[:-1] if argv_file.exists() else []
    return done, argv


def split_at_separator(argv: list[str]) -> tuple[list[str], list[str]]:
    """``srun OPTS ray symmetric-run RAY_OPTS -- COMMAND``: (RAY_OPTS, COMMAND), split where Ray splits it."""
    start = argv.index("symmetric-run")
    assert argv[start - 1] == "ray", argv
    separator = argv.index("--")
    return argv[start + 1:separator], argv[separator + 1:]


def test_the_sbatch_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_broken_copy_fails_bash_n(tmp_path):
    broken = tmp_path / "broken.sbatch"
    broken.write_text(SBATCH.read_text().replace("\nfi\n", "\n", 1))  # an `if` never closed
    done = subprocess.run(["bash", "-n", str(broken)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "syntax error" in done.stderr


def test_the_job_takes_whole_nodes_one_ray_node_each():
    directives = sbatch_directives()
    assert directives["--ntasks-per-node"] == "1"
    assert "--exclusive" in directives
    assert int(directives["--nodes"]) >= 1 and int(directives["--gpus-per-node"]) >= 1


def test_ray_symmetric_run_gets_options_ray_accepts(tmp_path):
    from ray.scripts.scripts import start  # Ray's CLI: seconds to import; starts nothing
    from ray.scripts.symmetric_run import curate_and_validate_ray_start_args, symmetric_run

    done, argv = run_sbatch(tmp_path)
    assert done.returncode == 0, done.stderr
    assert argv[:2] == ["--nodes=2", "--ntasks=2"]  # one task on each node
    ray_opts, _ = split_at_separator(argv)
    params = symmetric_run.make_context("symmetric-run", ray_opts + ["--", "true"]).params
    assert (params["address"], params["min_nodes"]) == ("node1:6379", 2)
    ray_start_opts = curate_and_validate_ray_start_args(ray_opts)  # refuses --head, --port, --block
    start_params = start.make_context("start", ray_start_opts + ["--address", "node1:6379"]).params
    assert (start_params["num_cpus"], start_params["num_gpus"]) == (64, 4)
    assert start_params["dashboard_host"] == "0.0.0.0"  # the tunnel from the login node reaches it
    assert "dashboard: ssh -L 8265:node1:8265" in done.stdout


def test_the_search_the_script_runs_parses_and_loads_as_a_spec(tmp_path):
    done, argv = run_sbatch(tmp_path)
    assert done.returncode == 0, done.stderr
    _, command = split_at_separator(argv)
    args = parse_cbs_ray_search(command)
    assert args.address == "auto"  # the cluster symmetric-run started
    spec = load_spec(ROOT / args.space, args.overrides)
    assert spec.storage_path == str(tmp_path / "shared" / "cbs-ray")  # on the shared filesystem
    assert spec.resources.max_concurrent_trials == 2  # 2 nodes × 4 GPUs, 4 GPUs a trial
    assert args.output == str(tmp_path / "shared" / "cbs_results" / "sst2-bert-base")


def test_the_script_needs_the_shared_token_and_shared_storage(tmp_path):
    done, _ = run_sbatch(tmp_path, HOME=str(tmp_path / "nobody"))
    assert done.returncode == 2 and "ray get-auth-token --generate" in done.stderr
    done, argv = run_sbatch(tmp_path, SHARED="")
    assert done.returncode != 0 and "set SHARED to a directory on the shared filesystem" in done.stderr
    assert argv == []  # nothing started


def test_the_recipes_command_is_the_packages_console_script():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("scripts", {})
    assert scripts.get("cbs-ray") == "cbs_ray.cli:main"  # which hands `search ARGS` to cli.COMMANDS["search"]


@pytest.mark.parametrize("env, named", [
    ({"SLURM_JOB_NUM_NODES": "$(touch PWNED)"}, "SLURM_JOB_NUM_NODES"),
    ({"SLURM_JOB_NUM_NODES": "a[$(touch PWNED)]"}, "SLURM_JOB_NUM_NODES"),
    ({"SLURM_GPUS_PER_NODE": "a100:x[$(touch PWNED)]"}, "SLURM_GPUS_PER_NODE"),
    ({"SLURM_GPUS_PER_NODE": None}, "SLURM_GPUS_PER_NODE"),
    ({"SLURM_CPUS_ON_NODE": "0"}, "SLURM_CPUS_ON_NODE"),
])
def test_slurms_counts_are_checked_before_any_arithmetic(env, named, tmp_path):
    # Issue 40: the script evaluated SLURM_JOB_NUM_NODES and SLURM_GPUS_PER_NODE inside $((...)), where bash runs
    # an injected command; an unset SLURM_GPUS_PER_NODE stopped it with "unbound variable".
    unset = [k for k, v in env.items() if v is None]
    if unset:
        done, argv = run_sbatch(tmp_path, **{k: "" for k in unset})
    else:
        done, argv = run_sbatch(tmp_path, **env)
    assert done.returncode == 2 and f"error: {named} must be a positive whole number" in done.stderr, done.stderr
    assert "unbound variable" not in done.stderr and argv == []
    assert not (ROOT / "PWNED").exists() and not (tmp_path / "PWNED").exists()
