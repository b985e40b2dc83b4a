/* A count of done callbacks still to come, for a caller that waits for a keyed group's
 * tensors without a thread or event loop of its own (the Keras hook on torch, which
 * hands each gradient over from an autograd hook and waits for them all in the
 * optimizer's apply). Each tensor handed over adds one (mlc_latch_add); the core's done
 * callback for it (mlc_latch_done, an mlc_callback) takes one and keeps the first
 * failure; mlc_latch_wait returns once the count is back to zero. The core runs every
 * handed-over tensor's done callback, also when its group fails or is cancelled, so a
 * wait after the last add ends. */
#include <pthread.h>
#include <stdlib.h>

#include "base.h"

struct mlc_latch {
    pthread_mutex_t lock;
    pthread_cond_t zero;
    int64_t left;
    int status; /* the first failure, or MLC_OK */
};

mlc_latch *mlc_latch_create(void) {
    mlc_latch *latch = calloc(1, sizeof *latch);
    if (!latch) return NULL;
    pthread_mutex_init(&latch->lock, NULL);
    pthread_cond_init(&latch->zero, NULL);
    return latch;
}

void mlc_latch_add(mlc_latch *latch, int64_t n) {
    pthread_mutex_lock(&latch->lock);
    latch->left += n;
    pthread_mutex_unlock(&latch->lock);
}

void mlc_latch_done(void *user_data, int status) {
    mlc_latch *latch = user_data;
    pthread_mutex_lock(&latch->lock);
    if (status != MLC_OK && latch->status == MLC_OK) latch->status = status;
    if (--latch->left == 0) pthread_cond_broadcast(&latch->zero);
    pthread_mutex_unlock(&latch->lock);
}

int mlc_latch_wait(mlc_latch *latch) {
    pthread_mutex_lock(&latch->lock);
    while (latch->left > 0) pthread_cond_wait(&latch->zero, &latch->lock);
    const int status = latch->status;
    latch->status = MLC_OK;
    pthread_mutex_unlock(&latch->lock);
    return status;
}

void mlc_latch_free(mlc_latch *latch) {
    if (!latch) return;
    pthread_mutex_destroy(&latch->lock);
    pthread_cond_destroy(&latch->zero);
    free(latch);
}
