/* The pages a copy will write.
 *
 * On this kind of machine a copy-on-write fault costs about 20 us (timed
 * with a plain C loop over fresh pages after fork), and a copy
 * takes hundreds of them while it reinitialises the interpreter and runs
 * the agent's code. MADV_POPULATE_WRITE makes the same private copies
 * ahead, at about 5.6 us a page (the same loop), one process_madvise for
 * all the ranges of a set (populate). So, once warm, the template learns
 * which pages a copy writes, from a probe copy that goes through the same
 * steps, and every later copy populates those pages first. File-backed
 * pages the probe read are populated for reading likewise
 * (MADV_POPULATE_READ): fork does not copy their page tables. A kernel
 * without these advices (before 5.14) refuses them, and copies then fault
 * as before.
 *
 * The probe learns two sets. The base set is what a plain run (print(1))
 * touches, and every copy populates it first. The preloads' set is what the
 * probe's path through the preloaded numpy and pandas touches beyond it
 * (runtime._prewarm): with numpy and pandas preloaded, 530 of the 870
 * pages a copy wrote ahead and 650 of the 2,340 it mapped for reading
 * (each page populated costs about 5 us here, and more at the copy's
 * exit). A copy populates it while it is prepared (its warming,
 * tpl_copy.c), or, when it skipped that (a caller already waits for it,
 * or it is one of a burst), right before a run whose code names a
 * preloaded module (tpl_populate_for); a run that reaches one otherwise
 * faults on those pages. Which set a copy populates depends on its own
 * code, its own preparation and the probe alone, never on what other runs
 * did. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
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

/* Contract: the pages this process touched, read from pagemap, an open
 * /proc/self/pagemap of this very process (the caller checks that it is:
 * own_pagemap), coalesced into at most cap ranges of at most max_pages
 * pages in all, in address order, in out; returns the number of ranges. In
 * its private writable mappings the pages it holds exclusively (copied on
 * write since its last fork, or new since then, or no longer shared with a
 * process that ended); with private_only nothing else, otherwise also, in
 * its readable file-backed and other readable mappings, the pages present
 * (fork copies no page table entries for those, so present means read
 * since). Special mappings ([vdso], [vvar]) are left out: they cannot be
 * populated. Mappings over PREFAULT_MAX_MAPPING are skipped, and at most
 * PREFAULT_MAX_SCANNED of address space is read. Shared by the template's
 * probe (probe_report) and a session's pre-copy (tpl_precopy_learn). */
static size_t scan_pages(int pagemap, bool private_only, size_t max_pages, prefault_range *out,
                         size_t cap)
{
        FILE *maps = fopen("/proc/self/maps", "re");
        if (!maps)
                return 0;
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        size_t ranges = 0, pages = 0;
        uint64_t scanned = 0;
        char line[512];
        while (ranges < cap && pages < max_pages && fgets(line, sizeof(line), maps)) {
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
                if (private_only && !write)
                        continue;
                uint64_t want = PAGEMAP_PRESENT | (write ? PAGEMAP_EXCLUSIVE : 0);
                prefault_range r = {.write = write};
                uint64_t ent[512];
                for (uint64_t v = lo; v < hi && ranges < cap;) {
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
                                bool hit =
                                    (ent[i] & want) == want && pages < max_pages && ranges < cap;
                                if (hit && !r.len)
                                        r.start = v;
                                if (hit) {
                                        r.len += page;
                                        pages++;
                                }
                                if (r.len && (!hit || v + page >= hi)) {
                                        out[ranges++] = r;
                                        r.len = 0;
                                }
                        }
                }
        }
        fclose(maps);
        return ranges;
}

/* Sends the probe's own touched pages (scan_pages) to out, as
 * prefault_range records, and a record of zeroes after them. */
static void probe_report(int out)
{
        int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        if (pagemap < 0)
                _exit(1);
        static prefault_range found[PREFAULT_MAX_RANGES + 1];
        size_t n = scan_pages(pagemap, false, PREFAULT_MAX_PAGES, found, PREFAULT_MAX_RANGES);
        close(pagemap);
        found[n++] = (prefault_range){0};
        if (al_write_full(out, found, n * sizeof(found[0])) < 0)
                _exit(1);
}

/* The pages of a[0..na) that are in none of b[0..nb), into out (at most cap
 * ranges); both in address order, as scan_pages gives them. Returns the
 * number of ranges. */
static size_t subtract_ranges(const prefault_range *a, size_t na, const prefault_range *b,
                              size_t nb, prefault_range *out, size_t cap)
{
        size_t n = 0, j = 0;
        for (size_t i = 0; i < na && n < cap; i++) {
                uint64_t s = a[i].start, e = a[i].start + a[i].len;
                while (j < nb && b[j].start + b[j].len <= s)
                        j++;
                for (size_t k = j; k < nb && b[k].start < e && s < e && n < cap; k++) {
                        if (b[k].start > s)
                                out[n++] = (prefault_range){s, b[k].start - s, a[i].write};
                        if (b[k].start + b[k].len > s)
                                s = b[k].start + b[k].len;
                }
                if (s < e && n < cap)
                        out[n++] = (prefault_range){s, e - s, a[i].write};
        }
        return n;
}

/* Reads the probe's two reports from fd until it closes or the deadline:
 * the base set into tpl->prefault, the whole set into all. Returns whether
 * both came whole. */
static bool read_reports(struct template_state *tpl, int fd, pid_t pid, prefault_range *all,
                         size_t *n_all)
{
        /* The probe takes milliseconds; one that takes longer than
         * PROBE_TIMEOUT_MS is stopped rather than left holding up every
         * later copy. */
        uint64_t deadline = al_now_ns() + PROBE_TIMEOUT_MS * 1000000ull;
        int ends = 0;
        prefault_range r;
        for (;;) {
                uint64_t now = al_now_ns();
                struct pollfd pf = {fd, POLLIN, 0};
                int k = now < deadline ? poll(&pf, 1, (int)((deadline - now) / 1000000 + 1)) : 0;
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        kill(pid, SIGKILL);
                        return false;
                }
                ssize_t n = read(fd, &r, sizeof(r));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n != (ssize_t)sizeof(r))
                        return ends == 2;
                if (!r.len && ++ends <= 2)
                        continue;
                if (ends == 0 && tpl->n_prefault < PREFAULT_MAX_RANGES)
                        tpl->prefault[tpl->n_prefault++] = r;
                else if (ends == 1 && *n_all < PREFAULT_MAX_RANGES)
                        all[(*n_all)++] = r;
                else {
                        /* More than scan_pages sends: not a probe's
                         * report, and its writer is not left blocked. */
                        kill(pid, SIGKILL);
                        return false;
                }
        }
}

/* Learns the pages a copy touches from a probe: a plain fork of the warm
 * template that goes through exactly a copy's interpreter steps (the
 * after-fork reset, then plain once: the base set; then steps once,
 * airlock's own code only: the preloads' set is what it touched beyond the
 * base) and reports what it touched after each. A probe that fails leaves
 * nothing learned, and copies prepare as they did without it. */
static void learn(struct template_state *tpl, void (*plain)(void), void (*steps)(void))
{
        _cleanup_close_pair_ int p[2] = {-1, -1};
        if (pipe2(p, O_CLOEXEC) < 0)
                return;
        guest_before_fork();
        pid_t pid = fork();
        if (pid == 0) {
                close(p[0]);
                /* Changing to the mapped ids made the template undumpable,
                 * which puts its /proc files out of its own reach; the probe
                 * only reads its own, and is gone right after. */
                prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
                guest_after_fork_child(-1);
                plain();
                probe_report(p[1]);
                steps();
                probe_report(p[1]);
                _exit(0);
        }
        guest_after_fork_parent();
        /* The probe's end: read until it closes. */
        p[1] = tpl_close(p[1]);
        if (pid < 0)
                return;
        static prefault_range all[PREFAULT_MAX_RANGES];
        size_t n_all = 0;
        bool whole = read_reports(tpl, p[0], pid, all, &n_all);
        /* Reaped on every path, after a kill if it overran, for its exit
         * status, which says whether its report is whole. */
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        /* A probe cut short reported only part: use none of it. */
        if (!whole || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                tpl->n_prefault = tpl->n_prefault_preloads = 0;
                return;
        }
        tpl->n_prefault_preloads = subtract_ranges(all, n_all, tpl->prefault, tpl->n_prefault,
                                                   tpl->prefault_preloads, PREFAULT_MAX_RANGES);
}

/* Lays out set r[0..n) in iov as populate gives it: the ranges to write,
 * then those to read. */
static void make_iov(const prefault_range *r, size_t n, struct iovec *iov, size_t *ret_writes)
{
        size_t k = 0;
        for (int write = 1; write >= 0; write--) {
                for (size_t i = 0; i < n; i++)
                        if ((r[i].write != 0) == (write != 0))
                                iov[k++] = (struct iovec){(void *)(uintptr_t)r[i].start, r[i].len};
                if (write)
                        *ret_writes = k;
        }
}

void tpl_learn_prefault(struct template_state *tpl, void (*plain)(void), void (*steps)(void))
{
        learn(tpl, plain, steps);
        make_iov(tpl->prefault, tpl->n_prefault, tpl->populate_iov[0], &tpl->populate_writes[0]);
        make_iov(tpl->prefault_preloads, tpl->n_prefault_preloads, tpl->populate_iov[1],
                 &tpl->populate_writes[1]);
}

/* Populates set [which] (template_state.populate_iov) through pidfd, this
 * process's own: one system call for each kind of advice (al_advise). */
static void populate(const struct template_state *tpl, int which, int pidfd)
{
        const struct iovec *iov = tpl->populate_iov[which];
        size_t writes = tpl->populate_writes[which];
        size_t n = which ? tpl->n_prefault_preloads : tpl->n_prefault;
        al_advise(pidfd, iov, writes, MADV_POPULATE_WRITE);
        al_advise(pidfd, iov + writes, n - writes, MADV_POPULATE_READ);
}

/* This process as a pidfd, or -1 (al_advise then makes a call a range). */
static int self_pidfd(void)
{
        return (int)syscall(SYS_pidfd_open, getpid(), 0);
}

/* In a new copy, before anything else touches memory: its own copies of
 * the pages the probe wrote, and page table entries for those it read; and
 * those of the preloads' set too once a run of this process named a
 * preload (a session's process after a restore). */
void tpl_populate_learned(const struct template_state *tpl)
{
        bool preloads = tpl->preloads_populated && tpl->n_prefault_preloads;
        if (!tpl->n_prefault && !preloads)
                return; /* nothing learned: no pidfd either */
        _cleanup_close_ int pidfd = self_pidfd();
        populate(tpl, 0, pidfd);
        if (preloads)
                populate(tpl, 1, pidfd);
}

/* Whether code names one of the preloaded modules (the top-level package
 * of each: "sklearn" for "sklearn.linear_model"), as any import of it
 * does. */
static bool names_a_preload(const template_params *p, const char *code, size_t len)
{
        for (size_t i = 0; i < p->n_preloads; i++) {
                const char *m = p->preloads[i];
                size_t top = strcspn(m, ".");
                if (top && memmem(code, len, m, top))
                        return true;
        }
        return false;
}

void tpl_populate_preloads(struct template_state *tpl)
{
        if (tpl->preloads_populated)
                return;
        tpl->preloads_populated = true;
        if (!tpl->n_prefault_preloads)
                return;
        _cleanup_close_ int pidfd = self_pidfd();
        populate(tpl, 1, pidfd);
}

void tpl_populate_for(struct template_state *tpl, const char *code, size_t len)
{
        if (!tpl->preloads_populated && tpl->n_prefault_preloads &&
            names_a_preload(&tpl->params, code, len))
                tpl_populate_preloads(tpl);
}

/* --- A session's pre-copy ---
 *
 * A session's active process forks a cell base before each cell, which
 * makes every page of it copy-on-write again, and the cell then faults on
 * each page it writes (about 190 for `1+1`, 830 for a small pandas cell,
 * 5-17 us each on a small VM). The pages a cell writes are mostly those the
 * last one wrote. Just before the next base is forked (after the grace, while
 * the old base still shares every page it did not write), the pages this
 * process holds exclusively are those written since that base was forked
 * (tpl_precopy_learn); once the new base is forked they are copied in the
 * background, a chunk at a time, until a frame from the host comes
 * (tpl_precopy_populate). Pages left fault on demand as before.
 *
 * The pages copied last time are exclusive at the next scan whether or not
 * the cell wrote them, which would make the set grow to every page any cell
 * ever wrote (each copy a page of memory not shared with the base). Each
 * copied page's contents are hashed when it is copied; one whose hash is the
 * same at the next scan was not seen written, and after PRECOPY_KEEP_CELLS
 * such cells in a row it is left out. Not at once: Python's reference
 * counts go up and down again, so a cell writes many pages that it leaves
 * as they were (kept out at once, half the pages of a small pandas cell
 * faulted every other cell). A copy never changes a page's contents (the
 * base keeps its own), so neither a wrong hash nor a stale set can change
 * what a rollback restores: they cost only time or memory. */

/* Caps: the pages kept for the next cell (16 MiB, the memory they may
 * cost beside the base), and the chunk copied between two looks at the
 * host's channel (about 0.4 ms here); the scan reads at most
 * PREFAULT_MAX_PAGES pages. */
#define PRECOPY_MAX_PAGES   4096
#define PRECOPY_CHUNK_PAGES 64
/* A page copied for this many cells in a row without being seen written is
 * left out of the next set. */
#define PRECOPY_KEEP_CELLS 8

static struct {
        prefault_range r[PREFAULT_MAX_RANGES];
        size_t n;
        /* Per page of r, in order: its hash when it was copied, 0 when it
         * was not (yet); and the cells since it was last seen written. */
        uint64_t hash[PRECOPY_MAX_PAGES];
        uint8_t age[PRECOPY_MAX_PAGES];
        /* Learned since the last populate: the set is for the next cell. */
        bool fresh;
} precopy;

/* Contract: a fd of this process's own /proc/self/pagemap, opened once per
 * process and kept, or -1. A session's process is undumpable (the template
 * changed its ids), which makes its /proc files root's: it is dumpable only
 * for the open, then undumpable again (the process ends if it cannot be,
 * which the host sees as the session's end). That window gives guest code
 * nothing it does not already have: it runs in this very process, which it
 * may make dumpable itself at any time (prctl is not filtered), and every
 * other process that could open this one's files in it is the same guest's
 * in the same copy (other copies are in other PID namespaces, and those of
 * this copy were stopped at the end of the cell: tpl_session_freeze). A fd
 * of pagemap reads the memory of the process that opened it, for as long as
 * it is open, and is inherited by every process forked from this one (cell
 * bases, restores, forks): so the fd is used only when it is still the one
 * /proc/self/pagemap names now (same inode: the same process, which guest
 * code cannot have replaced by another file of that inode), and otherwise
 * closed when it is still the one opened then, and opened anew. Never reads
 * another process's map. */
static int own_pagemap(void)
{
        static int fd = -1;
        static dev_t dev;
        static ino_t ino;
        struct stat now, st;
        if (stat("/proc/self/pagemap", &now) < 0)
                return -1;
        bool valid = fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
        if (valid && st.st_dev == now.st_dev && st.st_ino == now.st_ino)
                return fd;
        if (valid)
                close(fd);
        fd = -1;
        int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
        if (dumpable != 1 && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
                return -1;
        int f = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        if (dumpable != 1 && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                _exit(0);
        if (f < 0 || fstat(f, &st) < 0 || st.st_dev != now.st_dev || st.st_ino != now.st_ino) {
                if (f >= 0)
                        close(f);
                return -1;
        }
        fd = f;
        dev = st.st_dev;
        ino = st.st_ino;
        return fd;
}

/* A hash of one page's contents; never 0 (which marks a page not copied).
 * Reads memory that is the guest's: no sanitizer's view of it applies. */
__attribute__((no_sanitize_address)) static uint64_t page_hash(const void *p, size_t len)
{
        const uint64_t *w = p;
        const uint64_t k = 0x9e3779b97f4a7c15ull;
        uint64_t a = 1, b = 2, c = 3, d = 4;
        for (size_t i = 0; i + 4 <= len / sizeof(*w); i += 4) {
                a = (a ^ w[i]) * k;
                b = (b ^ w[i + 1]) * k;
                c = (c ^ w[i + 2]) * k;
                d = (d ^ w[i + 3]) * k;
        }
        uint64_t h = a ^ (b << 17 | b >> 47) ^ (c << 31 | c >> 33) ^ (d << 47 | d >> 17);
        return h ? h : 1;
}

/* Appends the page at v to the ranges out[*n], coalesced. */
static void add_page(prefault_range *out, size_t *n, uint64_t v, uint64_t page)
{
        if (*n && out[*n - 1].start + out[*n - 1].len == v) {
                out[*n - 1].len += page;
                return;
        }
        out[(*n)++] = (prefault_range){.start = v, .len = page, .write = 1};
}

/* The age of the page at v for the next set: 0 when it was seen written
 * since the last scan (it was not copied then, so it is exclusive only by a
 * write, or its contents changed since it was copied), else one more than
 * it had (copied, and its contents as then: Python's reference counts go
 * up and down again, so such a page may well have been written too). The
 * last set is walked from range *ri on, whose first page is hash index *hi;
 * v only grows from call to call. */
static unsigned next_age(uint64_t v, uint64_t page, size_t *ri, size_t *hi)
{
        while (*ri < precopy.n && precopy.r[*ri].start + precopy.r[*ri].len <= v) {
                *hi += precopy.r[*ri].len / page;
                (*ri)++;
        }
        if (*ri >= precopy.n || v < precopy.r[*ri].start)
                return 0;
        size_t i = *hi + (v - precopy.r[*ri].start) / page;
        if (i >= PRECOPY_MAX_PAGES || !precopy.hash[i] ||
            precopy.hash[i] != page_hash((const void *)(uintptr_t)v, page))
                return 0;
        return precopy.age[i] + 1u;
}

/* The oldest age (exclusive) of the pages kept out of ages[0..n), so that
 * at most PRECOPY_MAX_PAGES are: those seen written most recently first. */
static unsigned age_limit(const uint8_t *ages, size_t n)
{
        size_t count[PRECOPY_KEEP_CELLS] = {0};
        for (size_t i = 0; i < n; i++)
                if (ages[i] < PRECOPY_KEEP_CELLS)
                        count[ages[i]]++;
        unsigned limit = 1;
        for (size_t total = count[0];
             limit < PRECOPY_KEEP_CELLS && total + count[limit] <= PRECOPY_MAX_PAGES; limit++)
                total += count[limit];
        return limit;
}

void tpl_precopy_learn(void)
{
        precopy.fresh = false;
        int pagemap = own_pagemap();
        if (pagemap < 0)
                return;
        static prefault_range found[PREFAULT_MAX_RANGES], kept[PREFAULT_MAX_RANGES];
        static uint8_t found_ages[PREFAULT_MAX_PAGES], ages[PRECOPY_MAX_PAGES];
        size_t n = scan_pages(pagemap, true, PREFAULT_MAX_PAGES, found, ARRAY_SIZE(found));
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        size_t nfound = 0, ri = 0, hi = 0;
        for (size_t i = 0; i < n; i++)
                for (uint64_t v = found[i].start; v < found[i].start + found[i].len; v += page) {
                        unsigned age = next_age(v, page, &ri, &hi);
                        found_ages[nfound++] = (uint8_t)(age < 255 ? age : 255);
                }
        unsigned limit = age_limit(found_ages, nfound);
        size_t m = 0, pages = 0, j = 0;
        for (size_t i = 0; i < n && pages < PRECOPY_MAX_PAGES; i++) {
                for (uint64_t v = found[i].start;
                     v < found[i].start + found[i].len && pages < PRECOPY_MAX_PAGES; v += page) {
                        uint8_t age = found_ages[j++];
                        if (age >= limit)
                                continue;
                        /* A page that does not extend the last range needs
                         * a range of its own. */
                        if (m == ARRAY_SIZE(kept) && kept[m - 1].start + kept[m - 1].len != v)
                                break;
                        add_page(kept, &m, v, page);
                        ages[pages++] = age;
                }
        }
        memcpy(precopy.r, kept, m * sizeof(kept[0]));
        precopy.n = m;
        memset(precopy.hash, 0, pages * sizeof(precopy.hash[0]));
        memcpy(precopy.age, ages, pages);
        precopy.fresh = true;
}

void tpl_precopy_forget(void)
{
        precopy.fresh = false;
}

bool tpl_precopy_populate(int chan)
{
        if (!precopy.fresh)
                return false;
        precopy.fresh = false;
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        size_t hi = 0, unpolled = PRECOPY_CHUNK_PAGES;
        for (size_t i = 0; i < precopy.n; i++) {
                for (uint64_t off = 0; off < precopy.r[i].len;) {
                        struct pollfd p = {chan, POLLIN, 0};
                        if (unpolled >= PRECOPY_CHUNK_PAGES && poll(&p, 1, 0) != 0)
                                return true; /* the host's next frame: the rest faults */
                        if (unpolled >= PRECOPY_CHUNK_PAGES)
                                unpolled = 0;
                        uint64_t len = precopy.r[i].len - off;
                        if (len > (PRECOPY_CHUNK_PAGES - unpolled) * page)
                                len = (PRECOPY_CHUNK_PAGES - unpolled) * page;
                        uint64_t at = precopy.r[i].start + off;
                        bool done = madvise((void *)(uintptr_t)at, len, MADV_POPULATE_WRITE) == 0;
                        for (uint64_t v = at; v < at + len; v += page, hi++)
                                if (done && hi < PRECOPY_MAX_PAGES)
                                        precopy.hash[hi] =
                                            page_hash((const void *)(uintptr_t)v, page);
                        off += len;
                        unpolled += (size_t)(len / page);
                }
        }
        return true;
}
