"""The agent's side of an evaluation: runs as the agent's user, without the secrets, with a memory and
process limit, and answers the evaluator's calls into the agent's modules (stdlib only; it runs in the
sandbox). Whatever the agent's code does here (print, exit, patch builtins, fork) happens in this
process, not in the evaluator's: the evaluator only ever sees plain data or an error.

    python -B agent_worker.py REGION_FD WAKE_FD WORKSPACE
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import marshal
import os
import pickle
import sys
import traceback

from call_channel import CALLABLE_MARK, Channel, ChannelClosed, NotPlainData, to_plain

TRACEBACK_LIMIT = 8000
REPLY_LIMIT = 4 * 1024 * 1024


def _error(kind: str, message: str) -> bytes:
    return json.dumps(["err", kind, message[-TRACEBACK_LIMIT:]]).encode()


def _describe(value):
    if callable(value) and not isinstance(value, type(sys)):
        return CALLABLE_MARK
    return to_plain(value)


def _module_names(module) -> dict:
    names = {}
    for name, value in list(vars(module).items()):
        if name.startswith("__") or isinstance(value, type(sys)):
            continue
        try:
            names[name] = _describe(value)
        except NotPlainData:
            continue  # an object that cannot cross: reachable only by calling what returns it (refused then)
    return names


def _apply_seeds(seeds: dict) -> None:
    """The evaluator seeded its global generators: the agent's code sees the same seeds here. numpy is
    seeded now if the agent's code imported it, else the moment it does: importing it only to seed it
    cost ~0.16 s of CPU per evaluation, a quarter of a game's (most strategies never import it)."""
    if "random" in seeds:
        import random

        random.seed(seeds["random"])
    if "numpy" in seeds:
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(seeds["numpy"])
        else:
            _NumpySeededOnImport.seed = seeds["numpy"]
            if not any(isinstance(finder, _NumpySeededOnImport) for finder in sys.meta_path):
                sys.meta_path.insert(0, _NumpySeededOnImport())


class _NumpySeededOnImport(importlib.abc.MetaPathFinder):
    """Seeds numpy's global generator with the latest seed when numpy is first imported (then steps aside)."""

    seed: int = 0

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201 (the finder protocol)
        if fullname != "numpy":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("numpy")
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def load_and_seed(module) -> None:  # noqa: ANN001
            load(module)
            module.random.seed(_NumpySeededOnImport.seed)

        spec.loader.exec_module = load_and_seed  # type: ignore[method-assign]
        return spec


def _result(result) -> bytes:
    if type(result) is int:
        return b"i%d" % result
    return json.dumps(["ok", to_plain(result)]).encode()


def call_failed(name: str) -> bytes:
    """The reply for an exception out of a known function (called from inside the ``except``)."""
    exc = sys.exc_info()[1]
    if isinstance(exc, NotPlainData):
        return _error("unplain", f"{name} returned a value the evaluator cannot take: {exc}")
    return _error("exception", traceback.format_exc())  # SystemExit and KeyboardInterrupt too


def handle(request: bytes, modules: dict, functions: dict, names: dict) -> bytes:
    decode = marshal.loads if request[:1] == b"m" else pickle.loads
    op, module_name, name, args, kwargs, seeds, fid = decode(request[1:])  # from the trusted evaluator
    if seeds:
        _apply_seeds(seeds)
    try:
        if op == "call":
            function = getattr(modules[module_name], name)
            if fid is not None:
                key = b"C" + fid.to_bytes(4, "little")
                functions[key], names[key] = function, f"{module_name}.{name}"
            return _result(function(*args, **(kwargs or {})))
        if op == "import":
            modules[module_name] = importlib.import_module(module_name)
            return json.dumps(["ok", _module_names(modules[module_name])]).encode()
        module = modules[module_name]
        if op == "getattr":
            if not hasattr(module, name):
                return _error("attribute", f"module {module_name!r} has no attribute {name!r}")
            return json.dumps(["ok", _describe(getattr(module, name))]).encode()
        return _error("protocol", f"unknown request {op!r}")
    except NotPlainData as exc:
        return _error("unplain", f"{module_name}.{name} returned a value the evaluator cannot take: {exc}")
    except BaseException:  # SystemExit and KeyboardInterrupt from the agent's code too: its failure
        kind = "import" if op == "import" else "exception"
        return _error(kind, traceback.format_exc())


def _seed_from_environment() -> None:
    """This evaluation's seed for the agent's side (eval_runner derives it from the evaluator's, which the
    agent's code never sees): a strategy that draws from ``random`` or ``numpy.random`` without seeding
    them draws the same numbers for the same submission. Seeded before the agent's modules are imported,
    so their own seeding wins."""
    seed = os.environ.pop("AIR_EVAL_SEED", "")
    if seed.isdigit():
        try:
            _apply_seeds({"random": int(seed), "numpy": int(seed) % 2**32})
        except Exception as exc:  # a numpy that fails to import here must not cost the evaluation
            print(f"air agent worker: seeding failed: {exc!r}", file=sys.stderr)


def main() -> None:
    region_fd, wake_fd, workspace = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    _seed_from_environment()
    channel = Channel("worker", region_fd, wake_fd)
    sys.path.insert(0, workspace)
    sys.argv = ["strategy"]
    modules: dict = {}
    functions: dict = {}

    names: dict = {}
    loads = marshal.loads

    def handle_request(request: bytes) -> bytes:
        function = functions.get(request[:5])
        if function is not None:  # the hot path (``b"C" fid args``): a game makes ~100,000 of these
            try:
                result = function(*loads(request[5:]))
                if type(result) is int:
                    return b"i%d" % result
                reply = _result(result)
            except BaseException:
                return call_failed(names[request[:5]])
        else:
            reply = handle(request, modules, functions, names)
        if len(reply) > REPLY_LIMIT:
            reply = _error("unplain", f"the reply is {len(reply)} bytes; at most 4 MiB can cross")
        return reply

    channel.serve(handle_request)


if __name__ == "__main__":
    try:
        main()
    except ChannelClosed:
        os._exit(0)  # the evaluator is done
    except Exception as exc:  # the evaluator sees the channel close and reports it
        print(f"air agent worker stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
        os._exit(3)
