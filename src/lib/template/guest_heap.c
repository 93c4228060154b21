/* A copy's own heap for Python's small objects.
 *
 * A copy starts as a fork of the template, so every page of the template's
 * heap is shared and copied on the first write. Python's allocator serves
 * a new object from the partly used pool of its size class, which is the
 * template's: a copy's first allocations of each size write the template's
 * pools, one copy-on-write fault (a page copied and a TLB flush, which the
 * hypervisor handles on this kind of machine) per pool. Counted at each
 * step of a copy (a debug build, print(1), no preload): compiling the
 * warming run's three lines wrote 49 pages, 9 with this heap; a ready copy
 * has written 259 pages instead of 284 to 292, 1,127 instead of 1,195 to
 * 1,207 with numpy and pandas preloaded (bench_runcost.py BUILD --written),
 * about 20 of them this heap's own, filled with zeros at their first write.
 *
 * So each copy (and the template's probe, which goes through the same
 * steps) serves Python's object and memory domains of up to 512 bytes from
 * a region that the template reserved and never touched: a first write
 * there is a page filled with zeros, with no copy and no flush, and the
 * probe learns those pages as it learns the others. Blocks come in 16-byte
 * classes, each page of the region holding blocks of one class; a freed
 * block goes on its class's list. Larger requests, requests once the region
 * is used up, and the memory the template allocated (freed or resized in
 * the copy) go to Python's own allocator, which the copy keeps underneath.
 *
 * The region is reserved writable (MAP_NORESERVE) in the template, which
 * never writes it: without a cgroup a copy's memory limit is RLIMIT_DATA,
 * which counts it, so it is small (GUEST_HEAP_BYTES); with a cgroup only
 * the pages written are charged, to the copy. Every process made from a
 * copy (a session's cell bases, forks and rollbacks) inherits its heap as
 * it inherits the rest of its memory. Python calls these functions only
 * with the GIL held, so they need no lock of their own. */
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "template/guest_heap.h"

/* The region's size, and the largest block served from it (Python's own
 * small-object limit). */
#define GUEST_HEAP_BYTES (8u << 20)
#define HEAP_PAGE        4096u
#define HEAP_MAX_BLOCK   512u
#define HEAP_CLASSES     (HEAP_MAX_BLOCK / 16)

static char *heap_lo, *heap_hi;
/* The next page not yet given to a class. */
static char *heap_next;
/* The class of each page given out, by index from heap_lo. */
static uint8_t page_class[GUEST_HEAP_BYTES / HEAP_PAGE];
/* Per class: its free blocks, and the unused rest of its newest page. */
static void *free_list[HEAP_CLASSES];
static char *carve[HEAP_CLASSES], *carve_end[HEAP_CLASSES];
/* Python's own allocators, underneath: the memory and object domains. */
static PyMemAllocatorEx under[2];
static bool installed;

static bool owned(const void *p)
{
        return (const char *)p >= heap_lo && (const char *)p < heap_hi;
}

static size_t class_size(unsigned c)
{
        return (c + 1) * 16u;
}

/* A block of class c, or NULL when the region is used up. */
static void *heap_take(unsigned c)
{
        void *p = free_list[c];
        if (p) {
                free_list[c] = *(void **)p;
                return p;
        }
        size_t size = class_size(c);
        if (!carve[c] || (size_t)(carve_end[c] - carve[c]) < size) {
                if (heap_next >= heap_hi)
                        return NULL;
                page_class[(heap_next - heap_lo) / HEAP_PAGE] = (uint8_t)c;
                carve[c] = heap_next;
                carve_end[c] = heap_next + HEAP_PAGE;
                heap_next += HEAP_PAGE;
        }
        p = carve[c];
        carve[c] += size;
        return p;
}

static void *heap_malloc(void *ctx, size_t n)
{
        PyMemAllocatorEx *u = ctx;
        void *p = n <= HEAP_MAX_BLOCK ? heap_take(n ? (unsigned)((n - 1) / 16) : 0) : NULL;
        return p ? p : u->malloc(u->ctx, n);
}

static void *heap_calloc(void *ctx, size_t nelem, size_t elsize)
{
        PyMemAllocatorEx *u = ctx;
        if (elsize && nelem > HEAP_MAX_BLOCK / elsize)
                return u->calloc(u->ctx, nelem, elsize);
        size_t n = nelem * elsize;
        void *p = heap_take(n ? (unsigned)((n - 1) / 16) : 0);
        if (!p)
                return u->calloc(u->ctx, nelem, elsize);
        memset(p, 0, n);
        return p;
}

static void heap_free(void *ctx, void *p)
{
        PyMemAllocatorEx *u = ctx;
        if (!p)
                return;
        if (!owned(p)) {
                u->free(u->ctx, p);
                return;
        }
        unsigned c = page_class[((char *)p - heap_lo) / HEAP_PAGE];
        *(void **)p = free_list[c];
        free_list[c] = p;
}

static void *heap_realloc(void *ctx, void *p, size_t n)
{
        PyMemAllocatorEx *u = ctx;
        if (!p)
                return heap_malloc(ctx, n);
        if (!owned(p))
                return u->realloc(u->ctx, p, n);
        size_t old = class_size(page_class[((char *)p - heap_lo) / HEAP_PAGE]);
        /* Shrinking, or growing within the block, keeps it. */
        if (n <= old && n > old / 2)
                return p;
        void *q = heap_malloc(ctx, n);
        if (!q)
                return NULL;
        memcpy(q, p, n < old ? n : old);
        heap_free(ctx, p);
        return q;
}

void guest_heap_reserve(void)
{
        void *m = mmap(NULL, GUEST_HEAP_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
                return; /* copies then use Python's allocator alone */
        heap_lo = heap_next = m;
        heap_hi = heap_lo + GUEST_HEAP_BYTES;
}

void guest_heap_install(void)
{
        if (installed || !heap_lo)
                return;
        installed = true;
        static const PyMemAllocatorDomain domains[2] = {PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
        for (size_t i = 0; i < 2; i++) {
                PyMem_GetAllocator(domains[i], &under[i]);
                PyMemAllocatorEx a = {&under[i], heap_malloc, heap_calloc, heap_realloc, heap_free};
                PyMem_SetAllocator(domains[i], &a);
        }
}
