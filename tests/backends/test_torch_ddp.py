"""ml_comm.torch: DistributedDataParallel with ml_comm's bucket hook at 1-3 ranks ends
with the same weights on every rank, within 1e-6 of DDP over gloo; mismatched buckets
fail on every rank naming what each submitted. Runs where PyTorch is installed."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from mpi_helpers import Checks, comm_world

import ml_comm as mc

torch = pytest.importorskip("torch")
mt = pytest.importorskip("ml_comm.torch")
pytestmark = pytest.mark.mpi
STEPS = 5


@pytest.fixture(scope="module")
def session():
    comm_world().barrier()
    mc.init(2, 1, 4096)
    mt.init_process_group()
    yield mc.get_rank(), mc.get_nranks()
    mt.destroy_process_group()
    mc.finalize()


def test_a_rendezvous_rank_0_cannot_offer_fails_on_every_rank(monkeypatch):
    """Ranks on two hosts where rank 0's host name resolves to a loopback address (as
    Debian's /etc/hosts has it): every rank raises, naming it, instead of the others
    waiting for rank 0's address. Runs before the module's session (no process group)."""
    comm = comm_world()
    rank = comm.rank
    from ml_comm.torch import process_group

    monkeypatch.setattr(process_group.socket, "gethostname", lambda: f"node{min(rank, 1)}")
    monkeypatch.setattr(process_group.socket, "gethostbyname", lambda name: "127.0.1.1")
    if comm.size == 1:
        pytest.skip("needs two hosts' names, so two ranks")
    with pytest.raises(
        mc.MLCommError, match=r"rank 0's host name 'node0' resolves to 127\.0\.1\.1"
    ):
        mt.init_process_group(comm=comm)
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize(
    "argument,value,named",
    [("backend", "nccl", "backend 'nccl' is not built"), ("timeout_s", 0, "timeout_s must")],
)
def test_an_argument_one_rank_gets_wrong_fails_on_every_rank(argument, value, named):
    """The last rank's backend (the CPU wheels lack NCCL) or timeout is wrong: every rank
    raises before the rendezvous, naming that rank, instead of the others waiting for it
    until their timeout; the same wrong argument on every rank raises on every rank,
    naming it. Runs before the module's session (no process group)."""
    comm = comm_world()
    if comm.size == 1:
        pytest.skip("one rank has no other rank to tell")
    if argument == "backend" and torch.distributed.is_nccl_available():
        pytest.skip("this PyTorch has NCCL")
    wrong = {argument: value} if comm.rank == comm.size - 1 else {}
    with pytest.raises(mc.BadArgumentError, match=f"rank {comm.size - 1}: {named}"):
        mt.init_process_group(comm=comm, **wrong)
    assert not torch.distributed.is_initialized()
    # The same wrong argument on every rank.
    with pytest.raises(mc.BadArgumentError, match=f"every rank: {named}"):
        mt.init_process_group(comm=comm, **{argument: value})
    assert not torch.distributed.is_initialized()


def ddp_model(seed: int):
    """Rank `seed`'s own initial weights: DDP broadcasts rank 0's. Buckets of a few KiB,
    so that the model's gradients travel in several."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 3),
    )  # fmt: skip
    return torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)


def train(model, rank: int) -> list[np.ndarray]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(100 + rank)
    for _ in range(STEPS):
        x = torch.from_numpy(rng.integers(-2, 3, size=(8, 6)).astype(np.float32))
        y = torch.from_numpy(rng.integers(-2, 3, size=(8, 3)).astype(np.float32))
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


def same_as_gloo(checks: Checks, ours: list, gloo: list, what: str) -> None:
    """The hook's weights: the same on every rank, within 1e-6 of DDP over gloo's."""
    checks.same_on_all_ranks(ours, what)
    for i, (a, b) in enumerate(zip(ours, gloo)):
        gap = float(np.max(np.abs(a - b)))
        checks.true(gap <= 1e-6, f"parameter {i}: {gap} from DDP over gloo")


def test_hook_trains_as_ddp_over_gloo(session):
    rank, nranks = session
    checks = Checks()
    hooked = ddp_model(rank)
    mt.register_ddp_hook(hooked)
    before = mc.team_stats(0)["calls"]
    ours = train(hooked, rank)
    # DDP's first step fills one bucket, the later ones (its buckets rebuilt) several.
    buckets = mc.team_stats(0)["calls"] - before
    checks.true(buckets >= 2 * STEPS - 1, f"{buckets} buckets in {STEPS} steps: want several")
    gloo = train(ddp_model(rank), rank)
    same_as_gloo(checks, ours, gloo, "weights trained with the ml_comm hook")
    checks.finish()


def test_buckets_that_differ_fail_on_every_rank(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    averager = mt.BucketAverager(0)
    future = averager.submit(torch.ones(3 + rank))
    checks.raises(mc.MismatchError, future.wait, words=("rank 1 submitted 1 tensor, 4 float32",))
    averager.close()
    checks.finish()


def test_a_bucket_that_fails_fails_backward_on_every_rank(session):
    """The last rank's model in float64: its buckets differ from the others' in dtype,
    and every rank's backward() raises, naming ml_comm's error class and what each rank
    submitted (torch carries the text of a hook's error, not its class)."""
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    model = ddp_model(rank).module
    if rank == nranks - 1:
        model = model.double()
    hooked = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    mt.register_ddp_hook(hooked)
    dtype = next(model.parameters()).dtype
    loss = hooked(torch.ones(8, 6, dtype=dtype)).sum()
    error = checks.raises(RuntimeError, loss.backward, words=("MismatchError: DDP bucket",))
    checks.true(f"rank {nranks - 1} submitted 1 tensor" in str(error), f"names it: {error}")
    checks.finish()


def test_a_rank_that_left_a_marked_step_early_fails_the_others_step(session):
    """Steps marked with ml_comm.step: the last rank's step 2 raises before its backward
    (caught, as a loop that skips a bad batch does). The others' backward of step 2 raises,
    naming where the last rank is, instead of pairing their buckets with its step 3's; the
    ranks realign at step 3 and train to the same weights."""
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to leave behind")
    checks = Checks()
    model = ddp_model(rank)
    mt.register_ddp_hook(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    last = rank == nranks - 1
    failed = {}
    for step in range(1, 5):
        with mc.step(step):
            optimizer.zero_grad()
            loss = model(torch.full((4, 6), float(rank + step))).sum()
            if step == 2 and last:
                continue  # this rank's step ends early
            try:
                loss.backward()
            except RuntimeError as exc:
                failed[step] = str(exc)
                continue
            optimizer.step()
    if last:
        checks.true(not failed, f"no backward failed on the rank that left: {failed}")
    else:
        checks.true(sorted(failed) == [2], f"steps whose backward failed: {sorted(failed)}")
        words = f"rank {nranks - 1} is at step 3, call 0 on this team, this rank at step 2"
        checks.true(words in failed.get(2, ""), f"step 2's error names it: {failed.get(2)}")
    weights = [p.detach().numpy().copy() for p in model.parameters()]
    checks.same_on_all_ranks(weights, "weights after the ranks realigned")
    checks.finish()


def joined_training(model, rank: int, mark: bool) -> list[np.ndarray]:
    """Uneven data under DDP's Join: rank r runs 3 - r steps (at least 1); a rank whose
    data ran out stands in for the others' remaining backward passes, calling the hook
    after its loop, outside any mark of its own."""
    from torch.distributed.algorithms.join import Join

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Join([model]):
        for step in range(1, max(1, 3 - rank) + 1):
            with mc.step(step) if mark else contextlib.nullcontext():
                optimizer.zero_grad()
                model(torch.full((4, 6), float(rank + step))).sum().backward()
                optimizer.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("mark", [True, False], ids=["steps marked", "no marks"])
def test_uneven_data_under_join_trains_as_ddp_over_gloo(session, mark):
    rank, nranks = session
    checks = Checks()
    hooked = ddp_model(rank)
    mt.register_ddp_hook(hooked)
    ours = joined_training(hooked, rank, mark)
    gloo = joined_training(ddp_model(rank), rank, mark)
    same_as_gloo(checks, ours, gloo, "weights trained under Join with the ml_comm hook")
    checks.finish()


def test_training_threads_named_apart_train_alike(session):
    """DDP runs the hook on the thread that runs backward: threads whose names differ
    between the ranks (numbered by how many threads each rank started) train as one."""
    rank, nranks = session
    checks = Checks()
    hooked = ddp_model(rank)
    mt.register_ddp_hook(hooked)
    out: dict = {}

    def run() -> None:
        out["weights"] = train(hooked, rank)

    thread = threading.Thread(target=run, name=f"training on rank {rank}")
    thread.start()
    thread.join()
    checks.true("weights" in out, "training in the thread ended")
    checks.same_on_all_ranks(out.get("weights", []), "weights trained in threads named apart")
    checks.finish()


def test_a_hook_fails_clearly_after_its_session_ends(session):
    """finalize frees the teams: an averager made before it, used after a new init, fails
    its buckets with StateError instead of using the freed team."""
    checks = Checks()
    averager = mt.BucketAverager(0)
    mc.finalize()
    mc.init(2, 1, 4096)
    future = averager.submit(torch.ones(4))
    checks.raises(mc.StateError, future.wait, words=("session has ended",))
    averager.close()
    checks.finish()


@pytest.mark.parametrize(
    "bad,named",
    [
        (lambda: torch.arange(8.0)[::2], "not contiguous"),
        (lambda: torch.ones(4, dtype=torch.complex64), "cannot reduce dtype"),
    ],
    ids=["not contiguous", "complex"],
)
def test_a_bucket_one_rank_cannot_submit_fails_on_every_rank(session, bad, named):
    """The last rank's tensor cannot be averaged in place: its Future raises saying why,
    the others' matching request fails naming that rank (instead of pairing with its next
    one), and the next submits pair as written."""
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to tell")
    checks = Checks()
    averager = mt.BucketAverager(0)
    last = rank == nranks - 1
    future = averager.submit(bad() if last else torch.ones(4))
    told = (named,) if last else (f"rank {nranks - 1}",)
    checks.raises(mc.BadArgumentError, future.wait, words=told)
    after = averager.submit(torch.full((4,), float(rank))).wait()
    checks.equal(after.numpy(), np.full(4, (nranks - 1) / 2, np.float32), "the next average")
    averager.close()
    checks.finish()
