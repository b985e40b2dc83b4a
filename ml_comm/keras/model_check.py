"""Before a model's first broadcast: do the ranks hold the same model?

Rank 0's weights go to every rank as one broadcast of all of them; ranks whose models
differ (another layer, another width) would get an agreement error that counts tensors
and elements. This check says it in the model's terms first: each rank's layers,
weights, shapes and parameter count, grouped by rank, with the first weight that
differs. Ranks that hold one model but compiled it differently (compile_config.py:
another optimizer, learning rate, loss or metrics) would train apart without an error:
the check names each setting that differs. It costs one small allgather per model,
optimizer and session; a second one carries the descriptions only when the models
differ. Every rank raises the same error.
"""

from __future__ import annotations

import json
import zlib

import numpy as np

from .. import api as mc
from ..core.errors import MismatchError
from ..core.job_errors import raised_by_all
from ..core.spans import spans
from .compile_config import describe, differences

# Layers named in a description; a bigger model is summed up by its count.
NAMED_LAYERS = 8


def _shapes(model) -> list[tuple[str, tuple[int, ...], str]]:
    return [(w.path, tuple(int(d) for d in w.shape), str(w.dtype)) for w in model.weights]


def summary(model) -> dict:
    """What the ranks compare (the shapes and dtypes, in order) and what they show."""
    shapes = _shapes(model)
    layers = [type(layer).__name__ for layer in model.layers]
    named = ", ".join(layers) if len(layers) <= NAMED_LAYERS else "..."
    return {
        "layers": f"{len(layers)} layer{'s' if len(layers) != 1 else ''} ({named})",
        "weights": len(shapes),
        "parameters": int(sum(np.prod(shape, dtype=np.int64) for _, shape, _ in shapes)),
        "shapes": [[path, list(shape), dtype] for path, shape, dtype in shapes],
        "compiled": describe(model),
    }


def _signature(info: dict) -> int:
    kept = [(shape, dtype) for _, shape, dtype in info["shapes"]]
    compiled = sorted(info["compiled"].items())
    return zlib.crc32(repr((info["layers"].split(" (")[0], kept, compiled)).encode())


def check_same_model(model, team: int) -> None:
    """Collective over the team's ranks: raise MismatchError on every rank if the ranks'
    models differ, saying how."""
    if mc.get_nranks() == 1:
        return
    info = summary(model)
    text = np.frombuffer(json.dumps(info).encode(), dtype=np.uint8).astype(np.int32)
    mine = np.array([[_signature(info), text.size]], dtype=np.int64)
    everyone = mc.allgather(mine, team)
    if len(set(everyone[:, 0].tolist())) == 1:
        return
    texts = mc.allgather(text, team)
    bounds = np.cumsum([0, *everyone[:, 1].tolist()])
    infos = [
        json.loads(bytes(texts[a:b].astype(np.uint8)).decode())
        for a, b in zip(bounds[:-1], bounds[1:])
    ]
    raise raised_by_all(MismatchError(difference(infos)), mc.session().comm)


def difference(infos: list[dict]) -> str:
    """'the ranks' models differ: rank 0: ...; rank 1: ...; first difference: ...', or
    where they agree but were compiled differently, each setting that differs."""
    if len({_signature({**info, "compiled": {}}) for info in infos}) == 1:
        return (
            "the ranks compiled the model differently, and would apply the same averaged "
            "gradients differently and train apart: "
            + " | ".join(differences([info["compiled"] for info in infos]))
            + ". Compile the model alike on every rank (the same optimizer and learning "
            "rate or schedule, loss, metrics and jit_compile)"
        )
    groups: dict[str, list[int]] = {}
    for rank, info in enumerate(infos):
        said = f"{info['layers']}, {info['weights']} weights, {info['parameters']} parameters"
        groups.setdefault(said, []).append(rank)
    held = "; ".join(
        f"rank{'s' if len(ranks) > 1 else ''} {spans(ranks)}: {said}"
        for said, ranks in groups.items()
    )
    return (
        f"the ranks' models differ, so rank 0's weights cannot be broadcast to the others: "
        f"{held}; {_first_difference(infos)}. Every rank must build the same model (the "
        "same layers, in the same order, of the same sizes)"
    )


def _first_difference(infos: list[dict]) -> str:
    first = infos[0]["shapes"]
    for rank, info in enumerate(infos[1:], start=1):
        theirs = info["shapes"]
        for i in range(max(len(first), len(theirs))):
            a = first[i] if i < len(first) else None
            b = theirs[i] if i < len(theirs) else None
            if a is None or b is None or a[1:] != b[1:]:
                return (
                    f"first difference: weight {i}: rank 0 {_weight(a)}, rank {rank} {_weight(b)}"
                )
    return "the weights' shapes agree; the layers differ"


def _weight(entry) -> str:
    if entry is None:
        return "has none"
    path, shape, dtype = entry
    return f"{path} {tuple(shape)} {dtype}"
