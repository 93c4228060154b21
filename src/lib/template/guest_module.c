/* The guest module's one export (guest_module.h): the table of guest.c's
 * functions, and the way back to the template's tpl_proc_opened. Built into
 * the module only, never into the library. */
#include "template/guest_module.h"
#include "template/template.h"

static void (*proc_opened)(const char *path);

static void set_proc_opened(void (*fn)(const char *path))
{
        proc_opened = fn;
}

/* guest.c's audit hook calls this name; in the module it forwards to the
 * template's function. */
void tpl_proc_opened(const char *path)
{
        if (proc_opened)
                proc_opened(path);
}

__attribute__((visibility("default"))) const struct guest_module airlock_guest_module = {
    .size = sizeof(struct guest_module),
    .set_proc_opened = set_proc_opened,
    .init = guest_init,
    .warm_up = guest_warm_up,
    .before_fork = guest_before_fork,
    .start_cache_builder = guest_start_cache_builder,
    .set_session = guest_set_session,
    .channel_hold = guest_channel_hold,
    .after_fork_parent = guest_after_fork_parent,
    .after_fork_child = guest_after_fork_child,
    .after_fork_snapshot = guest_after_fork_snapshot,
    .init_signals = guest_init_signals,
    .install_init_signals = guest_install_init_signals,
    .end_of_run = guest_end_of_run,
    .run = guest_run,
    .set_argv = guest_set_argv,
    .set_stdin = guest_set_stdin,
};
