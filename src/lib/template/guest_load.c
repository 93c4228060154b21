/* The template's side of the guest module (guest_module.h): loading it, and
 * the guest_* functions of template.h, which call the loaded module.
 *
 * The module is embedded in this program (guest_blob.c). The template copies
 * it into a sealed memfd and opens it from there, as the host runs this very
 * program from a sealed memfd (sandbox/selfexe.c): the guest's
 * /proc/self/maps names "/memfd:airlock-guest (deleted)", never a path of the
 * host's build or install folders, and the bytes loaded are the program's
 * own, which no sandbox can change. libpython, which the module links, is
 * loaded by its soname, as it was when the program linked it: the path of a
 * Debian library, the same inside the sandbox as outside. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "template/guest_module.h"
#include "template/template.h"

/* The module's bytes (guest_blob.c). */
extern const unsigned char guest_module_so[];
extern const unsigned char guest_module_so_end[];

static const struct guest_module *guest;

/* Contract: loads the embedded module once, from a sealed memfd that is
 * closed again before this returns, with RTLD_GLOBAL, so that the C
 * extensions the guest imports (numpy's, the standard library's) find
 * libpython's symbols as they would in python3; every symbol is bound now
 * (RTLD_NOW), in the template, so that no copy binds one and writes the
 * page it lives on. Runs in the template before it leaves the host's mount
 * namespace (the memfd is opened through /proc/self/fd, and libpython by its
 * path in the host's /usr). Returns 0, or -errno with a message in errbuf;
 * a failure leaves no fd open. */
int guest_load(char *errbuf, size_t errlen)
{
        if (guest)
                return 0;
        size_t size = (size_t)(guest_module_so_end - guest_module_so);
        int fd = al_memfd_exec("airlock-guest");
        if (fd < 0) {
                int e = errno;
                snprintf(errbuf, errlen, "python: memfd_create: %s", strerror(e));
                return -e;
        }
        if (al_write_full(fd, guest_module_so, size) < 0 || al_memfd_seal(fd) < 0) {
                int e = errno;
                close(fd);
                snprintf(errbuf, errlen, "python: cannot write the guest module: %s", strerror(e));
                return -e;
        }
        char path[40];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        close(fd);
        if (!h) {
                const char *why = dlerror();
                snprintf(errbuf, errlen, "python: cannot load the guest module: %s",
                         why ? why : "unknown error");
                return -ENOEXEC;
        }
        const struct guest_module *m = dlsym(h, GUEST_MODULE_SYMBOL);
        if (!m || m->size != sizeof(*m)) {
                snprintf(errbuf, errlen, "python: the guest module has no %s of this program's",
                         GUEST_MODULE_SYMBOL);
                return -ENOEXEC;
        }
        /* Never unloaded: every copy runs its code. */
        m->set_proc_opened(tpl_proc_opened);
        guest = m;
        return 0;
}

/* Each one is called only after guest_load succeeded: the template fails
 * before its first copy otherwise. */
int guest_init(const template_params *p, char *errbuf, size_t errlen)
{
        return guest->init(p, errbuf, errlen);
}

int guest_warm_up(char *errbuf, size_t errlen)
{
        return guest->warm_up(errbuf, errlen);
}

void guest_before_fork(void)
{
        guest->before_fork();
}

pid_t guest_start_cache_builder(void)
{
        return guest->start_cache_builder();
}

void guest_set_session(void)
{
        guest->set_session();
}

void guest_channel_hold(bool hold)
{
        guest->channel_hold(hold);
}

void guest_after_fork_parent(void)
{
        guest->after_fork_parent();
}

void guest_after_fork_child(int channel_fd)
{
        guest->after_fork_child(channel_fd);
}

void guest_after_fork_snapshot(int channel_fd)
{
        guest->after_fork_snapshot(channel_fd);
}

void guest_init_signals(bool on)
{
        guest->init_signals(on);
}

void guest_install_init_signals(void)
{
        guest->install_init_signals();
}

void guest_end_of_run(void)
{
        guest->end_of_run();
}

void guest_set_argv(const char *const *argv, size_t n)
{
        guest->set_argv(argv, n);
}

void guest_set_stdin(const char *mode)
{
        guest->set_stdin(mode);
}

int guest_run(const char *code, size_t len, bool last, const char **ret_status)
{
        return guest->run(code, len, last, ret_status);
}
