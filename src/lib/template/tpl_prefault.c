/* The pages a copy will write.
 *
 * On this kind of machine a copy-on-write fault costs about 20 us (timed
 * with a plain C loop over fresh pages after fork), and a copy
 * takes hundreds of them while it reinitialises the interpreter and goes
 * through its warming runs: most of its preparation time, which decides how
 * soon after a run the next copy is ready. madvise(MADV_POPULATE_WRITE)
 * makes the same private copies in one call, at about 5.6 us a page (the
 * same loop). So, once warm, the template learns which pages a copy
 * writes, from a probe copy that goes through the same steps, and every
 * later copy populates those pages first. File-backed pages the probe read
 * are populated for reading likewise (MADV_POPULATE_READ): fork does not
 * copy their page tables. A kernel without these advices (before 5.14)
 * refuses them, and copies then fault as before. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "template/template.h"
#include "template/template_internal.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* Caps: ranges kept (PREFAULT_MAX_RANGES), and pages in them (64 MiB),
 * whatever the probe saw; and the address space it reads the page map of:
 * mappings over 1 GiB (AddressSanitizer's shadow, reserved arenas) are
 * skipped, and at most 4 GiB in all is read. */
#define PREFAULT_MAX_PAGES   16384
#define PREFAULT_MAX_MAPPING (1ull << 30)
#define PREFAULT_MAX_SCANNED (1ull << 32)
#define PROBE_TIMEOUT_MS     2000

#define PAGEMAP_PRESENT   (1ull << 63)
#define PAGEMAP_EXCLUSIVE (1ull << 56)

/* Sends the probe's own touched pages to out, coalesced into ranges, as
 * prefault_range records: in its private writable mappings the pages it
 * holds exclusively (copied on write, or new), in its readable file-backed
 * and other readable mappings the pages present (fork copies no page table
 * entries for those, so present means read by the probe). Special
 * mappings ([vdso], [vvar]) are left out: they cannot be populated. */
_Noreturn static void probe_report(int out)
{
        /* Changing to the mapped ids made the template undumpable, which
         * puts its /proc files out of its own reach; the probe only reads
         * its own, and is gone right after. */
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        FILE *maps = fopen("/proc/self/maps", "re");
        int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        if (!maps || pagemap < 0)
                _exit(1);
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        size_t ranges = 0, pages = 0;
        uint64_t scanned = 0;
        char line[512];
        while (ranges < PREFAULT_MAX_RANGES && pages < PREFAULT_MAX_PAGES &&
               fgets(line, sizeof(line), maps)) {
                unsigned long lo, hi;
                char perms[8], name[256] = "";
                if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perms, name) < 3 ||
                    perms[0] != 'r' || hi <= lo || hi - lo > PREFAULT_MAX_MAPPING ||
                    scanned + (hi - lo) > PREFAULT_MAX_SCANNED)
                        continue;
                scanned += hi - lo;
                if (name[0] == '[' && strcmp(name, "[heap]") != 0 && strcmp(name, "[stack]") != 0)
                        continue;
                bool write = strcmp(perms, "rw-p") == 0;
                uint64_t want = PAGEMAP_PRESENT | (write ? PAGEMAP_EXCLUSIVE : 0);
                prefault_range r = {.write = write};
                uint64_t ent[512];
                for (uint64_t v = lo; v < hi && ranges < PREFAULT_MAX_RANGES;) {
                        size_t k = (size_t)((hi - v) / page);
                        if (k > ARRAY_SIZE(ent))
                                k = ARRAY_SIZE(ent);
                        ssize_t n = pread(pagemap, ent, k * sizeof(ent[0]),
                                          (off_t)(v / page * sizeof(ent[0])));
                        if (n <= 0)
                                break;
                        for (size_t i = 0; i < (size_t)n / sizeof(ent[0]); i++, v += page) {
                                /* Past a cap, the open range ends and no
                                 * new one starts. */
                                bool hit = (ent[i] & want) == want && pages < PREFAULT_MAX_PAGES &&
                                           ranges < PREFAULT_MAX_RANGES;
                                if (hit && !r.len)
                                        r.start = v;
                                if (hit) {
                                        r.len += page;
                                        pages++;
                                }
                                if (r.len && (!hit || v + page >= hi)) {
                                        if (al_write_full(out, &r, sizeof(r)) < 0)
                                                _exit(1);
                                        ranges++;
                                        r.len = 0;
                                }
                        }
                }
        }
        _exit(0);
}

/* Learns the pages a copy touches from a probe: a plain fork of the warm
 * template that goes through exactly a copy's interpreter steps (the
 * after-fork reset, then steps passes times: the warming runs, airlock's
 * own code only) and reports what it touched. A probe that fails leaves
 * nothing learned, and copies prepare as they did without it. */
void tpl_learn_prefault(struct template_state *tpl, void (*steps)(void), int passes)
{
        _cleanup_close_pair_ int p[2] = {-1, -1};
        if (pipe2(p, O_CLOEXEC) < 0)
                return;
        guest_before_fork();
        pid_t pid = fork();
        if (pid == 0) {
                close(p[0]);
                guest_after_fork_child(-1);
                for (int pass = 0; pass < passes; pass++)
                        steps();
                probe_report(p[1]);
        }
        guest_after_fork_parent();
        /* The probe's end: read until it closes. */
        p[1] = tpl_close(p[1]);
        /* The probe is reaped below on every path, after a kill if it
         * overruns, for its exit status, which says whether its report is
         * whole. */
        if (pid > 0) {
                /* The probe takes milliseconds; one that takes longer than
                 * PROBE_TIMEOUT_MS is stopped rather than left holding up
                 * every later copy. */
                uint64_t deadline = al_now_ns() + PROBE_TIMEOUT_MS * 1000000ull;
                prefault_range r;
                for (;;) {
                        uint64_t now = al_now_ns();
                        struct pollfd pf = {p[0], POLLIN, 0};
                        int k = now < deadline ? poll(&pf, 1, (int)((deadline - now) / 1000000 + 1))
                                               : 0;
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0) {
                                kill(pid, SIGKILL);
                                break;
                        }
                        ssize_t n = read(p[0], &r, sizeof(r));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n != (ssize_t)sizeof(r) || tpl->n_prefault >= PREFAULT_MAX_RANGES)
                                break;
                        tpl->prefault[tpl->n_prefault++] = r;
                }
                int status = 0;
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                        ;
                /* A probe cut short reported only part: use none of it. */
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        tpl->n_prefault = 0;
        }
}

/* In a new copy, before anything else touches memory: its own copies of
 * the pages the probe wrote, and page table entries for those it read. */
void tpl_populate_learned(const struct template_state *tpl)
{
        for (size_t i = 0; i < tpl->n_prefault; i++)
                (void)madvise((void *)(uintptr_t)tpl->prefault[i].start, tpl->prefault[i].len,
                              tpl->prefault[i].write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}
