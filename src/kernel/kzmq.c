/* libzmq, opened when `airlock kernel` starts rather than linked into the
 * program, for the reason src/mcp/mhd.c gives for libmicrohttpd: every
 * process that runs the program (each `airlock run`, and each sandbox's
 * template, which is this program executed again) would load and relocate
 * it, and what it brings (libstdc++, libsodium, libpgm, libnorm, GnuTLS
 * through libgssapi...), for a protocol only the kernel speaks. The kernel
 * calls libzmq through the table below, filled by kzmq_open. */
#include <dlfcn.h>
#include <errno.h>

#include "kernel.h"

/* The SONAME of libzmq 4.x (Debian's libzmq5). */
#define KZMQ_SONAME "libzmq.so.5"

kzmq_table kz;

int kzmq_open(airlock_error *err)
{
        struct {
                const char *name;
                void **slot;
        } syms[] = {
            {"zmq_ctx_new", (void **)&kz.ctx_new},
            {"zmq_ctx_term", (void **)&kz.ctx_term},
            {"zmq_socket", (void **)&kz.socket},
            {"zmq_close", (void **)&kz.close},
            {"zmq_setsockopt", (void **)&kz.setsockopt},
            {"zmq_bind", (void **)&kz.bind},
            {"zmq_msg_init", (void **)&kz.msg_init},
            {"zmq_msg_recv", (void **)&kz.msg_recv},
            {"zmq_msg_close", (void **)&kz.msg_close},
            {"zmq_msg_data", (void **)&kz.msg_data},
            {"zmq_msg_size", (void **)&kz.msg_size},
            {"zmq_msg_more", (void **)&kz.msg_more},
            {"zmq_send", (void **)&kz.send},
            {"zmq_poll", (void **)&kz.poll},
            {"zmq_strerror", (void **)&kz.strerror},
            {"zmq_errno", (void **)&kz.errno_},
        };
        void *so = dlopen(KZMQ_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!so)
                return al_error(err, -ELIBACC, KZMQ_SONAME, "cannot open %s (Debian's libzmq5): %s",
                                KZMQ_SONAME, dlerror());
        for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
                if (!(*syms[i].slot = dlsym(so, syms[i].name)))
                        return al_error(err, -ELIBACC, KZMQ_SONAME, "%s has no %s", KZMQ_SONAME,
                                        syms[i].name);
        return 0;
}
