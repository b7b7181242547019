"""The shipped ``examples/`` as modules, for the objects path's tests (unit and end to end)."""

import importlib.util
import sys

from helpers.paths import ROOT


def load_example(name: str):
    """examples/<name>.py as a module. Registered with Ray's cloudpickle by value, so Ray's workers rebuild
    its functions and classes without importing it (as for a script's ``__main__``), whatever the cwd."""
    module_name = f"cbs_example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, ROOT / "examples" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    return sys.modules[module_name]
