"""cohort's Python module as cohort provides it to every rank (files/python on PYTHONPATH).

A ``cohort`` that the rank's Python finds anywhere else on sys.path (a package the user
installed into site-packages, a directory on their own PYTHONPATH) wins: this stand-in then
imports that one in its place. Otherwise it imports the copy that came with the cohort binary
that runs the job (beside it, in package/), which has the same version as that binary.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _import_in_place():
    here = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    elsewhere = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = (importlib.machinery.PathFinder.find_spec(__name__, elsewhere) or
            importlib.machinery.PathFinder.find_spec(__name__, [os.path.join(here, "package")]))
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[__name__]
        raise


_import_in_place()
