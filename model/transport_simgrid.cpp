// The transport of csrc/transport/transport.h over SimGrid's S4U mailboxes, in
// sizes-only mode: a message is its byte count, nothing is allocated, copied or
// read, so the algorithms' buffers can be addresses that were never mapped.
//
// Matching is MPI's: a message goes to the mailbox of (communicator, source,
// destination, tag), and a mailbox delivers in posting order, as MPI does for one
// sender, tag and communicator. Posting a message costs the sender
// node.send_overhead_s on its host's core; completing a receive costs the receiver
// node.recv_overhead_s, and each side node.cpu_per_byte_s per byte (the CPU side of
// a message: MPI, and on the test bed the kernel's TCP; the wire side is the
// platform's latency and bandwidth). A send's per-byte CPU runs while its bytes move,
// as the kernel copies a stream out while it leaves, and the send completes when both
// are done; charged before the transfer instead, it stalled every ring step and made
// the 3-node ring 4 % slower per byte than the 2- and 4-node ones. Waits block the actor in simulated time instead of
// polling (csrc/transport/wait.c polls a real clock, which does not advance here), so
// this file implements transport.h's two waits; the rest of transport.h, which only
// posts through the ops below, is the core's csrc/transport/post.c, linked with it.
#include <simgrid/s4u.hpp>

#include <memory>
#include <string>
#include <vector>

#include "transport_simgrid.hpp"

namespace sg4 = simgrid::s4u;

namespace mlcsim {

namespace {

struct Slot {
    sg4::CommPtr comm;
    sg4::ExecPtr cpu;  // a send's per-byte CPU, running while its bytes move
    void *received = nullptr;  // where the mailbox puts the sender's (unused) payload
    bool is_recv = false;
    int64_t bytes = 0;
};

struct Endpoint {
    int comm_id;
    Counters *counters;
    std::vector<std::unique_ptr<Slot>> slots;
    std::vector<int> free_slots;
};

char token;  // every message's payload: its address only, never read

std::string mailbox_name(int comm_id, int src, int dst, int tag) {
    return std::to_string(comm_id) + ":" + std::to_string(src) + ">" + std::to_string(dst) + ":" +
           std::to_string(tag);
}

Endpoint *endpoint(const mlc_tp *tp) { return static_cast<Endpoint *>(tp->impl); }

int take_slot(Endpoint *ep) {
    if (ep->free_slots.empty()) {
        ep->slots.push_back(std::make_unique<Slot>());
        return (int)ep->slots.size() - 1;
    }
    int s = ep->free_slots.back();
    ep->free_slots.pop_back();
    return s;
}

Slot *slot_of(Endpoint *ep, const mlc_tp_req *req) {
    return req->opaque[0] ? ep->slots[req->opaque[0] - 1].get() : nullptr;
}

bool finished(Slot *s) { return s->comm->test() && (!s->cpu || s->cpu->test()); }

void release(Endpoint *ep, mlc_tp_req *req) {
    Slot *s = slot_of(ep, req);
    if (!s) return;
    s->comm = nullptr;
    s->cpu = nullptr;
    ep->free_slots.push_back((int)req->opaque[0] - 1);
    req->opaque[0] = 0;
}

// A completed request: the receiver's CPU cost, then the slot is free.
void complete(Endpoint *ep, mlc_tp_req *req) {
    Slot *s = slot_of(ep, req);
    if (s->is_recv) charge_core(node.recv_overhead_s + s->bytes * node.cpu_per_byte_s);
    else if (s->cpu) s->cpu->wait();
    release(ep, req);
}

int post(mlc_tp *tp, int64_t bytes, int peer, int tag, bool is_recv, mlc_tp_req *req) {
    Endpoint *ep = endpoint(tp);
    if (peer < 0 || peer >= tp->size || bytes < 0) return MLC_ERR_ARG;
    int s = take_slot(ep);
    Slot *slot = ep->slots[s].get();
    slot->is_recv = is_recv;
    slot->bytes = bytes;
    if (is_recv) {
        auto *mb = sg4::Mailbox::by_name(mailbox_name(ep->comm_id, peer, tp->rank, tag));
        slot->comm = mb->get_async<void>(&slot->received);
    } else {
        charge_core(node.send_overhead_s);
        auto *mb = sg4::Mailbox::by_name(mailbox_name(ep->comm_id, tp->rank, peer, tag));
        slot->comm = mb->put_async(&token, (uint64_t)bytes);
        slot->cpu = start_core(bytes * node.cpu_per_byte_s);
        ep->counters->messages++;
        ep->counters->bytes += bytes;
    }
    req->opaque[0] = (uint64_t)s + 1;
    return MLC_OK;
}

int sim_isend(mlc_tp *tp, const void *, int64_t bytes, int dest, int tag, mlc_tp_req *req) {
    return post(tp, bytes, dest, tag, false, req);
}

int sim_irecv(mlc_tp *tp, void *, int64_t bytes, int src, int tag, mlc_tp_req *req) {
    return post(tp, bytes, src, tag, true, req);
}

int sim_testall(mlc_tp *tp, int n, mlc_tp_req *reqs, int *done) {
    Endpoint *ep = endpoint(tp);
    *done = 1;
    for (int i = 0; i < n; i++) {
        Slot *s = slot_of(ep, &reqs[i]);
        if (s && finished(s)) complete(ep, &reqs[i]);
        else if (s) *done = 0;
    }
    return MLC_OK;
}

int sim_testany(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index) {
    Endpoint *ep = endpoint(tp);
    *index = -2;
    for (int i = 0; i < n; i++) {
        Slot *s = slot_of(ep, &reqs[i]);
        if (!s) continue;
        if (finished(s)) {
            complete(ep, &reqs[i]);
            *index = i;
            return MLC_OK;
        }
        *index = -1;
    }
    return MLC_OK;
}

void sim_abandon(mlc_tp *tp, int n, mlc_tp_req *reqs) {
    Endpoint *ep = endpoint(tp);
    for (int i = 0; i < n; i++) {
        Slot *s = slot_of(ep, &reqs[i]);
        if (!s) continue;
        if (s->comm->get_state() != sg4::Activity::State::FINISHED) s->comm->cancel();
        if (s->cpu && s->cpu->get_state() != sg4::Activity::State::FINISHED) s->cpu->cancel();
        release(ep, &reqs[i]);
    }
}

void sim_peek(mlc_tp *tp, mlc_tp_req *req, int *done) {
    Slot *s = slot_of(endpoint(tp), req);
    *done = !s || (s->comm->get_state() == sg4::Activity::State::FINISHED &&
                   (!s->cpu || s->cpu->get_state() == sg4::Activity::State::FINISHED));
}

const mlc_tp_ops sim_ops = {sim_isend, sim_irecv, sim_testall, sim_testany, sim_abandon, sim_peek};

}  // namespace

void transport_open(mlc_tp *tp, int rank, int size, int comm_id, Counters *counters) {
    *tp = mlc_tp{};
    tp->ops = &sim_ops;
    tp->impl = new Endpoint{comm_id, counters, {}, {}};
    tp->rank = rank;
    tp->size = size;
    tp->recv_peer = tp->send_peer = -1;
}

void transport_close(mlc_tp *tp) {
    delete endpoint(tp);
    tp->impl = nullptr;
}

}  // namespace mlcsim


// transport.h's waits, blocking in simulated time.
extern "C" {

int mlc_tp_waitall(mlc_tp *tp, int n, mlc_tp_req *reqs) {
    auto *ep = static_cast<mlcsim::Endpoint *>(tp->impl);
    for (int i = 0; i < n; i++) {
        mlcsim::Slot *s = mlcsim::slot_of(ep, &reqs[i]);
        if (!s) continue;
        s->comm->wait();
        mlcsim::complete(ep, &reqs[i]);
    }
    tp->recv_peer = tp->send_peer = -1;
    return MLC_OK;
}

int mlc_tp_waitany(mlc_tp *tp, int n, mlc_tp_req *reqs, int *index) {
    auto *ep = static_cast<mlcsim::Endpoint *>(tp->impl);
    std::vector<sg4::CommPtr> active;
    std::vector<int> which;
    for (int i = 0; i < n; i++) {
        mlcsim::Slot *s = mlcsim::slot_of(ep, &reqs[i]);
        if (!s) continue;
        active.push_back(s->comm);
        which.push_back(i);
    }
    if (active.empty()) {
        *index = -2;
        return MLC_OK;
    }
    ssize_t k = sg4::Comm::wait_any(active);
    *index = which[k];
    mlcsim::complete(ep, &reqs[*index]);
    return MLC_OK;
}
}
