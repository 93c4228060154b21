/* The kernel's Python side (driver.py), embedded as text: the assembler
 * includes the file's bytes, and a NUL ends them. The Makefile rebuilds
 * this object when driver.py changes. */
#include "kernel.h"

__asm__(".section .rodata\n"
        ".global kdriver_src\n"
        ".type kdriver_src, @object\n"
        "kdriver_src:\n"
        ".incbin \"src/kernel/driver.py\"\n"
        ".byte 0\n"
        ".previous\n");
