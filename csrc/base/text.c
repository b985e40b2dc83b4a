/* Building messages piece by piece in fixed buffers (error texts cross threads
 * and the C API in MLC_MSG_LEN bytes). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

void mlc_append(char *buf, size_t len, size_t *off, const char *fmt, ...) {
    if (*off + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    if (*off + (size_t)w >= len) {
        *off = len - 1;
        if (len > 4) memcpy(buf + len - 4, "...", 4);
        return;
    }
    *off += (size_t)w;
}
