/* libcurl's table, loaded once (see curl_dl.h). */
#include "curl_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

static al_curl cu;
const al_curl *const al_cu = &cu;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static bool curl_ready;
static char curl_problem[256] = "libcurl did not start";

static void curl_init_once(void)
{
        static const struct {
                const char *name;
                size_t offset;
        } syms[] = {
#define CURL_SYM(field) {"curl_" #field, offsetof(al_curl, field)}
            CURL_SYM(global_init),         CURL_SYM(easy_strerror), CURL_SYM(easy_init),
            CURL_SYM(easy_setopt),         CURL_SYM(easy_perform),  CURL_SYM(easy_getinfo),
            CURL_SYM(easy_reset),          CURL_SYM(easy_cleanup),  CURL_SYM(slist_append),
            CURL_SYM(slist_free_all),      CURL_SYM(multi_init),    CURL_SYM(multi_add_handle),
            CURL_SYM(multi_remove_handle), CURL_SYM(multi_perform), CURL_SYM(multi_info_read),
            CURL_SYM(multi_poll),          CURL_SYM(multi_cleanup),
#undef CURL_SYM
        };
        _Static_assert(sizeof(syms) / sizeof(syms[0]) * sizeof(void (*)(void)) == sizeof(al_curl),
                       "every field of al_curl has its row");
        void *so = dlopen(AL_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!so) {
                snprintf(curl_problem, sizeof(curl_problem), "cannot load %s: %s", AL_CURL_SONAME,
                         dlerror());
                return;
        }
        for (size_t i = 0; i < ARRAY_SIZE(syms); i++) {
                void *fn = dlsym(so, syms[i].name);
                if (!fn) {
                        snprintf(curl_problem, sizeof(curl_problem), "%s has no %s", AL_CURL_SONAME,
                                 syms[i].name);
                        return;
                }
                memcpy((char *)&cu + syms[i].offset, &fn, sizeof(fn));
        }
        CURLcode c = cu.global_init(CURL_GLOBAL_DEFAULT);
        if (c != CURLE_OK) {
                snprintf(curl_problem, sizeof(curl_problem), "libcurl did not start: %s",
                         cu.easy_strerror(c));
                return;
        }
        curl_ready = true;
}

const al_curl *al_curl_load(const char **problem)
{
        pthread_once(&curl_once, curl_init_once);
        if (curl_ready)
                return &cu;
        if (problem)
                *problem = curl_problem;
        return NULL;
}
