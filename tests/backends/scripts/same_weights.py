"""One Keras script, trained by one process on the global batch (`serial`) or by every
rank of an MPI launch on its share of each global batch with ml_comm.keras's two calls
(`ml_comm`); each process saves its final weights. Backend-neutral: KERAS_BACKEND picks
TensorFlow, JAX or torch.

    python same_weights.py serial OUT_DIR
    mpiexec -n 2 python same_weights.py ml_comm OUT_DIR
"""

import sys
from pathlib import Path

import keras
import numpy as np

MODE, OUT = sys.argv[1], Path(sys.argv[2])
BATCH = 4  # per rank; the serial run takes BATCH * nranks
STEPS, EPOCHS = 6, 2

if MODE == "ml_comm":
    import ml_comm as mc
    import ml_comm.keras as mk

    mk.init()
    rank, nranks = mc.get_rank(), mc.get_nranks()
else:
    rank, nranks = 0, int(sys.argv[3]) if len(sys.argv) > 3 else 2

rng = np.random.default_rng(0)
x = rng.normal(size=(STEPS * BATCH * nranks, 5)).astype(np.float32)
y = (np.arange(len(x)) % 3).astype(np.int32)
if MODE == "ml_comm":
    # This rank's share of every global batch: rows rank*BATCH .. (rank+1)*BATCH of each.
    rows = np.arange(len(x)).reshape(STEPS, nranks, BATCH)[:, rank].reshape(-1)
    x, y, batch = x[rows], y[rows], BATCH
else:
    batch = BATCH * nranks

keras.utils.set_random_seed(rank)  # other ranks start elsewhere: rank 0's are broadcast
model = keras.Sequential(
    [
        keras.Input((5,)),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dense(3, activation="softmax"),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
model.fit(x, y, batch_size=batch, epochs=EPOCHS, shuffle=False, verbose=0)
OUT.mkdir(parents=True, exist_ok=True)
np.savez(OUT / f"{MODE}_rank{rank}.npz", *model.get_weights())
print(
    f"{MODE} rank {rank}: backend {keras.backend.backend()}, jit_compile {model.jit_compile}, "
    f"tensorflow imported: {'tensorflow' in sys.modules}"
)
if MODE == "ml_comm":
    mk.finalize()
