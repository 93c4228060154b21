/* A copy's own heap for Python's small objects (guest_heap.c): reserved
 * once by the template, taken into use by each process forked from it
 * that runs Python (a copy, the template's probe). Part of the guest
 * module. */
#pragma once

/* In the template, before its first fork: the region, never written
 * there. Without it copies use Python's allocator alone. */
void guest_heap_reserve(void);

/* In a process forked from the template, before it runs any Python: the
 * region serves Python's small blocks from now on. Once per process;
 * again in a process forked from one that did, nothing. */
void guest_heap_install(void);
