/* Fuzzes the tenant's generation record (src/mcp/tenant_gen.c), which every
 * host of a shared tenants folder reads and any of them, or a writer killed
 * half-way, may have left in any state: the input is the whole state file.
 * Any bytes must give, for any generation a reader saw, either "nothing
 * new", or "everything", or at most TENANT_GEN_DIRS_MAX folders and
 * TENANT_GEN_FILES_MAX files, each a name within the record (no read past
 * it), with a 32-digit hash for a written one; and a bump over those bytes
 * must write, and leave a record whose reader, having seen the generation
 * before the bump, is told exactly the bumped file, or everything. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tenant_gen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const tenant_gen_change *c)
{
        if (c->all)
                return;
        if (c->n > TENANT_GEN_DIRS_MAX || c->n_files > TENANT_GEN_FILES_MAX)
                abort();
        for (size_t i = 0; i < c->n; i++)
                if (strlen(c->dirs[i]) > 65535)
                        abort();
        for (size_t i = 0; i < c->n_files; i++)
                if (strlen(c->files[i]) > 65535 || (c->hashes[i] && strlen(c->hashes[i]) != 32))
                        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        int fd = memfd_create("genrecord", MFD_CLOEXEC);
        if (fd < 0)
                return 0;
        if (size && write(fd, data, size) != (ssize_t)size) {
                close(fd);
                return 0;
        }
        uint64_t counter = 0;
        if (size >= sizeof(counter))
                memcpy(&counter, data, sizeof(counter));
        const uint64_t seen[] = {0, 1, counter - 1, counter, counter + 1, counter - 64};
        for (size_t i = 0; i < sizeof(seen) / sizeof(*seen); i++) {
                tenant_gen_change c;
                uint64_t gen;
                bool read;
                if (tenant_gen_since(fd, seen[i], i % 2 == 0, &c, &gen, &read) == 1)
                        check(&c);
                tenant_gen_change_free(&c);
        }
        /* A bump over whatever was there, then a reader that saw the
         * generation before it. */
        tenant_gen_change w = {0};
        tenant_gen_change_add_file(&w, "dir/written.txt", "hello", 5);
        uint64_t prev;
        uint64_t gen = tenant_gen_bump(fd, &w, &prev);
        tenant_gen_change_free(&w);
        /* A bump always writes (the file is memory here): one that did not
         * would leave every other host blind to this change and the next
         * (seed4: a record whose check holds and whose changes do not
         * walk). A counter at its end wraps to 0, which says nothing was
         * written. */
        if (!gen && counter != UINT64_MAX)
                abort();
        if (gen) {
                tenant_gen_change c;
                uint64_t now;
                bool read;
                if (gen != prev + 1 || tenant_gen_since(fd, prev, true, &c, &now, &read) != 1 ||
                    now != gen)
                        abort();
                check(&c);
                if (!c.all && (c.n != 0 || c.n_files != 1 ||
                               strcmp(c.files[0], "dir/written.txt") || c.sizes[0] != 5))
                        abort();
                tenant_gen_change_free(&c);
        }
        close(fd);
        return 0;
}
