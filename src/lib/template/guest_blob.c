/* The guest module's bytes (guest_module.h), built before the library and
 * included here whole: GUEST_MODULE_PATH is its path relative to the
 * repository (the Makefile's), never a host path. Read-only data of this
 * program, which the template copies into a sealed memfd (guest_load.c). */
#ifndef GUEST_MODULE_PATH
#error "GUEST_MODULE_PATH: the path of the built guest module (see the Makefile)"
#endif

__asm__(".pushsection .rodata.airlock_guest_module,\"a\"\n"
        ".balign 64\n"
        ".globl guest_module_so\n"
        ".hidden guest_module_so\n"
        "guest_module_so:\n"
        ".incbin \"" GUEST_MODULE_PATH "\"\n"
        ".globl guest_module_so_end\n"
        ".hidden guest_module_so_end\n"
        "guest_module_so_end:\n"
        ".popsection\n");
