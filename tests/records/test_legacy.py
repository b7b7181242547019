"""An experiment written before the subpackages pickled the old flat module names: they resolve while Tune
reads it, and only then, to inert stand-ins; reading it loads none of the layers above records."""

import ast
import pickle
import sys
import types
from pathlib import Path

import pytest

import cbs_ray.records.legacy as legacy
from cbs_ray.records.legacy import OLD_MODULES, StandIn, old_module_names


def _global(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n.".encode()  # pickle's GLOBAL opcode: what Tune's state holds for a class


def _pickled_as_old(module: str, name: str, **state) -> bytes:
    """An object of a class that lived in the old module ``module``, pickled as a format-1 experiment holds it."""
    old = types.ModuleType(module)
    cls = type(name, (), {"__module__": module, "__qualname__": name})
    old.__dict__[name] = cls
    sys.modules[module] = old
    try:
        obj = cls()
        obj.__dict__.update(state)
        return pickle.dumps(obj, protocol=2)
    finally:
        del sys.modules[module]


def test_old_names_resolve_to_stand_ins_inside_and_not_outside():
    stopper = _pickled_as_old("cbs_ray.nothing_fits", "NothingFitsStopper", reason="probe found nothing")
    with old_module_names():
        name_function = pickle.loads(_global("cbs_ray.experiment", "_trial_name"))  # Tune's trial-name function
        assert issubclass(name_function, StandIn) and name_function.__qualname__ == "_trial_name"
        restored = pickle.loads(stopper)
        assert isinstance(restored, StandIn) and type(restored).__module__ == "cbs_ray.nothing_fits"
        assert restored.pickled_state == {"reason": "probe found nothing"}
        # an old module that is a package now: its missing names resolve, its own names stay its own
        assert issubclass(pickle.loads(_global("cbs_ray.spec", "SearchParams")), StandIn)
        from cbs_ray.spec import schema
        assert pickle.loads(_global("cbs_ray.spec", "schema")) is schema
    assert "cbs_ray.trial" not in sys.modules and "cbs_ray.nothing_fits" not in sys.modules
    assert not hasattr(sys.modules["cbs_ray.spec"], "SearchParams")
    with pytest.raises((ModuleNotFoundError, AttributeError)):
        pickle.loads(_global("cbs_ray.nothing_fits", "NothingFitsStopper"))


def test_the_old_modules_were_flat_and_legacy_imports_nothing_of_the_package():
    assert all(old.count(".") == 1 for old in OLD_MODULES)  # the old modules were flat: cbs_ray.<module>
    tree = ast.parse(Path(legacy.__file__).read_text())
    imported = [n.module if isinstance(n, ast.ImportFrom) else a.name for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
    assert not [m for m in imported if m and (m.startswith("cbs_ray") or m == "importlib")], imported


def test_a_package_of_today_is_never_hidden_by_a_stand_in():
    assert legacy.is_package_now("cbs_ray.data") and legacy.is_package_now("cbs_ray.spec")
    assert not legacy.is_package_now("cbs_ray.trial")
    with old_module_names():
        import cbs_ray.data.arrays  # noqa: F401  (the real package, importable inside)
        assert hasattr(sys.modules["cbs_ray.data"], "__path__")
