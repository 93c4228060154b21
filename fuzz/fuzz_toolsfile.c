/* Fuzzes the tools file loader: the input is written to a file in a private
 * temporary folder and loaded into a fresh registry. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static char file[96];

static void remove_temp(void)
{
        unlink(file);
        rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (!dir[0]) {
                /* tmpfs when there is one: on ext4, truncating and closing
                 * a file flushes it, which would make each input a disk write. */
                strcpy(dir, access("/dev/shm", W_OK) == 0 ? "/dev/shm/airlock-fuzz-XXXXXX"
                                                          : "/tmp/airlock-fuzz-XXXXXX");
                if (!mkdtemp(dir))
                        abort();
                snprintf(file, sizeof(file), "%s/tools.json", dir);
                atexit(remove_temp);
        }
        unlink(file);
        int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
                abort();
        size_t off = 0;
        while (off < size) {
                ssize_t n = write(fd, data + off, size - off);
                if (n <= 0)
                        abort();
                off += (size_t)n;
        }
        close(fd);

        tool_registry *reg = NULL;
        airlock_error err = {0};
        if (tools_new(&reg, &err) < 0)
                abort();
        int r = tools_load_file(reg, file, 30, &err);
        if (r < 0 && !err.message[0])
                abort();
        if (r >= 0) {
                for (size_t i = 0; i < tools_count(reg); i++) {
                        const tool_info *t = tools_get(reg, i);
                        if (!t || !t->name || !json_is_object(t->parameters))
                                abort();
                }
                free(tools_fingerprint_text(reg));
        }
        tools_free(reg);
        return 0;
}
