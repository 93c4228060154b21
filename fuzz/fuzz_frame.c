/* Fuzzes the guest -> host channel: the input is parsed as one frame body,
 * and fed as a byte stream through a pipe to the incremental frame reader
 * with a small cap, so headers, oversized lengths, partial frames and
 * non-object bodies are all reached. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/channel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_t *j = NULL;
        if (channel_frame_parse((const char *)data, size, &j) >= 0) {
                if (!json_is_object(j))
                        abort();
                json_decref(j);
        }

        /* A pipe holds 64 KiB; longer inputs are cut there. */
        if (size > 60000)
                size = 60000;
        int p[2];
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
                return 0;
        size_t off = 0;
        while (off < size) {
                ssize_t n = write(p[1], data + off, size - off);
                if (n <= 0)
                        break;
                off += (size_t)n;
        }
        close(p[1]);
        frame_reader r;
        channel_reader_init(&r, 4096);
        for (int i = 0; i < 100000; i++) {
                json_t *msg = NULL;
                int k = channel_reader_feed(&r, p[0], &msg);
                if (k == 1) {
                        if (!json_is_object(msg))
                                abort();
                        json_decref(msg);
                        continue;
                }
                if (msg)
                        abort();
                if (k < 0)
                        break;
        }
        channel_reader_free(&r);
        close(p[0]);
        return 0;
}
