/* The guest module: the embedded interpreter (guest.c, with the guest
 * runtime's code) built as a shared object of its own, linked with
 * libpython, and embedded in the library as bytes. The template loads it
 * (guest_load.c); nothing else does, so that the programs linked with the
 * library (the airlock command, a caller's program, the Python package's
 * extension) never load and relocate libpython, which only the template
 * runs. The module exports one symbol, GUEST_MODULE_SYMBOL, the table below;
 * the template's guest_* functions (template.h) call through it. */
#ifndef AIRLOCK_GUEST_MODULE_H
#define AIRLOCK_GUEST_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/wire.h"

#define GUEST_MODULE_SYMBOL "airlock_guest_module"

/* One member per guest_* function of template.h, with its signature. The
 * module is built from the same tree as the library that embeds it, so the
 * table's size is its only check. */
struct guest_module {
        size_t size;
        /* The template's tpl_proc_opened, which the module's audit hook
         * calls: the module has no link to the program that loaded it. */
        void (*set_proc_opened)(void (*fn)(const char *path));
        int (*init)(const template_params *p, char *errbuf, size_t errlen);
        int (*warm_up)(char *errbuf, size_t errlen);
        void (*before_fork)(void);
        pid_t (*start_cache_builder)(void);
        void (*set_session)(void);
        void (*channel_hold)(bool hold);
        void (*after_fork_parent)(void);
        void (*after_fork_child)(int channel_fd);
        void (*after_fork_snapshot)(int channel_fd);
        void (*init_signals)(bool on);
        void (*install_init_signals)(void);
        void (*end_of_run)(void);
        int (*run)(const char *code, size_t len, bool last, const char **ret_status);
        void (*set_argv)(const char *const *argv, size_t n);
        void (*set_stdin)(const char *mode);
};

#endif
