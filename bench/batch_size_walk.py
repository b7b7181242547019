"""The walk of the batch size from the command line to the loop's micro-batches: which of the package's modules it
crosses, in order, counted mechanically.

    python bench/batch_size_walk.py [--space FILE] [--set KEY=VALUE ...] [--calls]

Runs ``cbs-ray search`` in this process without Ray (``cli.search_main``, on the embedded default unless ``--space``,
with ``--set search.batch_sizes=[128,256]`` first: the first trial trains at 128, which none of the default's other
batch settings holds). The driver's Ray session is left out, and its Tune run is the trial Tune would start first:
the searcher's first suggestion (a grid's first point) handed to ``train.trial.run_trial`` as Tune hands it, with the
data in hand instead of in the object store. It stops where the loop draws its first step's micro-batches
(``train.loop._optimizer_step``).

A profiler (``sys.setprofile``) sees every call of a ``cbs_ray`` function. A call *carries* the batch B when an
argument is B, holds it (a sequence), or holds it under a name with "batch" in it (a mapping's key, an attribute; B's
log2 under a name with "log2" in it, the trial point's ``log2_batch``; text such as ``search.batch_sizes=[128,256]``),
followed three levels into the package's own records (the spec's sections, a trial's plan). Four counts:

- reached: modules with a call that carries B, the spec included (every module the spec reaches);
- crossed: modules with a call that carries B outside the spec (not inside a ``SearchSpec``, its sections or a value
  named ``spec``), and how many of their functions do (a function that only hands B on is one of them; a record's
  accessor, whose only carrier is ``self``, is not);
- in hand: modules with a call that carries B (or a comprehension inside one) and has B itself bound to a name
  (an argument or a local) when it returns or while it calls something (a loop's variable);
- computed: modules with a call that has B in hand and returns a new value (not None, not B, not one of its
  arguments): a value derived from B, not B forwarded or extracted.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass, field

BATCHES = [128, 256]
"""The search's grid here: the first trial trains at 128."""


class WalkEnd(BaseException):
    """Raised where the loop draws its first micro-batches (not an Exception: the command line catches those)."""


@dataclass
class Module:
    """What one module's calls did with B."""

    name: str
    calls: list[str] = field(default_factory=list)
    crossed: list[str] = field(default_factory=list)
    """Its functions whose calls carried B outside the spec (B itself, a point, a plan, a trial's config)."""
    in_hand: list[str] = field(default_factory=list)
    computed: list[str] = field(default_factory=list)


def carries(value, batch: int, depth: int = 3, seen: set | None = None, *, spec: bool = True) -> bool:
    """Whether ``value`` carries ``batch`` (module docstring); not ``spec``: not inside a ``SearchSpec``."""
    if isinstance(value, bool) or (not spec and type(value).__module__ == "cbs_ray.spec.schema"):
        return False
    if isinstance(value, int):
        return value == batch
    if isinstance(value, str):
        return bool(re.search(rf"batch\w*\s*[=:].*\b{batch}\b", value))
    seen = set() if seen is None else seen
    if id(value) in seen or depth < 0:
        return False
    seen.add(id(value))
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        return any(carries(v, batch, depth, seen, spec=spec) for v in value)
    if isinstance(value, dict):
        items = list(value.items())
    elif type(value).__module__.startswith("cbs_ray") and hasattr(value, "__dict__"):
        items = list(vars(value).items())
    else:
        return False
    for key, item in items:
        named = isinstance(key, str) and "batch" in key
        log2 = named and "log2" in key and carries(item, batch.bit_length() - 1, 0)
        if named and (log2 or carries(item, batch, depth, seen, spec=spec)):
            return True
        if depth and not isinstance(item, (int, str)) and (spec or key != "spec") and \
                carries(item, batch, depth - 1, seen, spec=spec):
            return True
    return False


def in_hand(local_values: dict, batch: int) -> bool:
    return any(type(v) is int and v == batch for v in local_values.values())


def walk(argv: list[str], batch: int) -> tuple[list[Module], str]:
    """The modules the batch crosses while ``cbs-ray search argv`` runs up to its first trial's first step."""
    from cbs_ray import cli
    from cbs_ray.train import loop
    from cbs_ray.train.trial import DataRef, run_trial
    from cbs_ray.tune import driver

    class InHand(DataRef):
        def get(self):
            return self.ref

    def first_trial(spec, data, budget, model_config, *, plans, search_alg=None, param_space=None, **_):
        """The trial Tune would start first: the searcher's first suggestion (a grid's first point)."""
        points = getattr(search_alg, "_points_to_evaluate", None)
        point = dict(points[0]) if points and not hasattr(search_alg, "_ot_study") else search_alg.suggest("walk")
        run_trial(point, spec=spec, data_ref=InHand(data), budget_samples=budget, model_config=model_config,
                  plans=plans)

    def first_step(cfg, session, parts, position=None):
        raise WalkEnd(str(parts.batching))

    modules: dict[str, Module] = {}
    open_calls: dict[int, tuple[Module, str, dict]] = {}

    held: set[int] = set()  # the package's frames seen with B bound to a name while they called something

    def profile(frame, event, arg):
        caller = frame if event == "c_call" else frame.f_back if event == "call" else None
        if caller is not None and caller.f_globals.get("__name__", "").startswith("cbs_ray") and \
                in_hand(caller.f_locals, batch):  # a loop's variable is B only while that iteration runs
            held.add(id(caller))
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("cbs_ray") or event not in ("call", "return"):
            return
        if event == "call":
            code = frame.f_code
            arguments = {k: frame.f_locals[k] for k in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
                         if k in frame.f_locals}
            if any(carries(v, batch) for v in arguments.values()):
                module = modules.setdefault(name, Module(name))
                outside = [k for k, v in arguments.items() if k != "spec" and carries(v, batch, spec=False)]
                handed = [k for k in outside if k != "self"]  # a record's own accessor hands nothing on
                module.crossed += [code.co_qualname] if handed and code.co_qualname not in module.crossed else []
                call = f"{code.co_qualname}({', '.join(outside) or 'spec: ' + ', '.join(arguments)})"
                if call not in module.calls:
                    module.calls.append(call)
                open_calls[id(frame)] = (module, code.co_qualname, arguments)
            elif code.co_name.startswith("<") and frame.f_back is not None and id(frame.f_back) in open_calls:
                open_calls[id(frame)] = (open_calls[id(frame.f_back)][0], code.co_qualname, {})  # a comprehension
            return
        if id(frame) not in open_calls:  # B in hand counts only on the walk (not a loop counter elsewhere)
            return
        module, qualname, arguments = open_calls.pop(id(frame))
        if id(frame) in held:
            held.discard(id(frame))
        elif not in_hand(frame.f_locals, batch):
            return
        module.crossed += [qualname] if qualname not in module.crossed else []
        module.in_hand += [qualname] if qualname not in module.in_hand else []
        new = arg is not None and not (type(arg) is int and arg == batch) and \
            all(arg is not v for v in arguments.values())
        if new and qualname not in module.computed:
            module.computed.append(qualname)

    stubs = [(driver, "ray_session", lambda *a, **k: contextlib.nullcontext()),
             (driver, "on_the_cluster", lambda *a, **k: None), (driver, "run_tuner", first_trial),
             (loop, "_optimizer_step", first_step)]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in stubs]
    for owner, attr, stub in stubs:
        setattr(owner, attr, stub)
    try:
        sys.setprofile(profile)
        code = cli.search_main(argv)
        raise SystemExit(f"error: the search ended (exit {code}) before its first trial's first step")
    except WalkEnd as e:
        end = str(e)
    finally:
        sys.setprofile(None)
        for owner, attr, original in saved:
            setattr(owner, attr, original)
    return list(modules.values()), end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", help="search-space YAML (default: the embedded tiny default)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="further overrides, after search.batch_sizes=[128,256]")
    parser.add_argument("--calls", action="store_true", help="also list each module's calls that carried B")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        argv = (["--space", args.space] if args.space else []) + [
            "--set", f"search.batch_sizes={BATCHES}".replace(" ", ""), "--set", f"storage_path={tmp}/runs",
            *[x for o in args.overrides for x in ("--set", o)], "--output", f"{tmp}/report"]
        modules, end = walk(argv, BATCHES[0])
    print(f"cbs-ray search {' '.join(argv[:-2])}: B={BATCHES[0]} from the command line to {end}")
    print("       module                                       crossed  in hand  computed")
    for i, m in enumerate(modules, 1):
        print(f"{i:3d}    {m.name:44s} {'yes' if m.crossed else 'spec':7s}  {'yes' if m.in_hand else '':7s}  "
              f"{'yes' if m.computed else ''}")
        if args.calls:
            for call in m.calls:
                print(f"         {call}{'  [computed]' if call.split('(')[0] in m.computed else ''}")
            for qualname in m.in_hand:
                print(f"         {qualname}: B in hand{', computed' if qualname in m.computed else ''}")
    crossed = [m for m in modules if m.crossed]
    print(f"reached (the spec included): {len(modules)} modules; crossed (B outside the spec): {len(crossed)} "
          f"({sum(len(m.crossed) for m in modules)} functions); "
          f"B in hand: {sum(bool(m.in_hand) for m in modules)}; computed from it: "
          f"{sum(bool(m.computed) for m in modules)}")
    print("crossed, in order: " + " → ".join(m.name.removeprefix("cbs_ray.") for m in crossed))

if __name__ == "__main__":
    main()
