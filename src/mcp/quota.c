/* Per-owner quotas (see quota.h). The owners that hold anything are few
 * (at most the tokens of the file, 1024), and each is found by a walk of a
 * list under the table's lock; a record is freed when its owner holds
 * nothing, so that tokens that come and go leave nothing behind. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_session.h"
#include "quota.h"

typedef struct quota_owner {
        char owner[MCP_OWNER_MAX + 1];
        unsigned held[QUOTA_KINDS];
        struct quota_owner *next;
} quota_owner;

typedef struct quota_override {
        char owner[MCP_OWNER_MAX + 1];
        unsigned limit[QUOTA_KINDS];
        bool set[QUOTA_KINDS];
} quota_override;

struct quota_table {
        pthread_mutex_t lock;
        unsigned limit[QUOTA_KINDS];
        quota_owner *head;
        quota_override *over; /* the tenants file's limits, a few owners' */
        size_t n_over;
};

quota_table *quota_new(const unsigned limit[QUOTA_KINDS])
{
        quota_table *t = calloc(1, sizeof(*t));
        if (!t)
                return NULL;
        pthread_mutex_init(&t->lock, NULL);
        memcpy(t->limit, limit, sizeof(t->limit));
        return t;
}

void quota_free(quota_table *t)
{
        if (!t)
                return;
        while (t->head) {
                quota_owner *o = t->head;
                t->head = o->next;
                free(o);
        }
        free(t->over);
        pthread_mutex_destroy(&t->lock);
        free(t);
}

static quota_owner **find_locked(quota_table *t, const char *owner)
{
        quota_owner **p = &t->head;
        while (*p && strcmp((*p)->owner, owner ? owner : "") != 0)
                p = &(*p)->next;
        return p;
}

/* owner's limit of kind k: its override, else the table's. */
static unsigned limit_locked(quota_table *t, const char *owner, enum quota_kind k, bool *over)
{
        for (size_t i = 0; owner && i < t->n_over; i++)
                if (t->over[i].set[k] && strcmp(t->over[i].owner, owner) == 0) {
                        if (over)
                                *over = true;
                        return t->over[i].limit[k];
                }
        if (over)
                *over = false;
        return t->limit[k];
}

int quota_set_overrides(quota_table *t, const char *const *owners,
                        const unsigned (*limits)[QUOTA_KINDS], size_t n)
{
        quota_override *v = n ? calloc(n, sizeof(*v)) : NULL;
        if (n && !v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                snprintf(v[i].owner, sizeof(v[i].owner), "%s", owners[i]);
                for (int k = 0; k < QUOTA_KINDS; k++) {
                        v[i].set[k] = limits[i][k] != QUOTA_UNSET;
                        v[i].limit[k] = limits[i][k];
                }
        }
        pthread_mutex_lock(&t->lock);
        quota_override *old = t->over;
        t->over = v;
        t->n_over = n;
        pthread_mutex_unlock(&t->lock);
        free(old);
        return 0;
}

unsigned quota_limit(quota_table *t, const char *owner, enum quota_kind k, bool *overridden)
{
        pthread_mutex_lock(&t->lock);
        unsigned n = limit_locked(t, owner, k, overridden);
        pthread_mutex_unlock(&t->lock);
        return n;
}

int quota_take(quota_table *t, const char *owner, enum quota_kind k, unsigned *held,
               unsigned *limit)
{
        pthread_mutex_lock(&t->lock);
        quota_owner **p = find_locked(t, owner);
        quota_owner *o = *p;
        unsigned now = o ? o->held[k] : 0;
        if (held)
                *held = now;
        unsigned lim = limit_locked(t, owner, k, NULL);
        if (limit)
                *limit = lim;
        int r = 0;
        if (now >= lim) {
                r = -EDQUOT;
        } else if (!o && !(o = *p = calloc(1, sizeof(*o)))) {
                r = -ENOMEM;
        } else {
                snprintf(o->owner, sizeof(o->owner), "%s", owner ? owner : "");
                o->held[k]++;
        }
        pthread_mutex_unlock(&t->lock);
        return r;
}

void quota_give(quota_table *t, const char *owner, enum quota_kind k)
{
        pthread_mutex_lock(&t->lock);
        quota_owner **p = find_locked(t, owner);
        quota_owner *o = *p;
        if (o && o->held[k]) {
                o->held[k]--;
                bool empty = true;
                for (int i = 0; i < QUOTA_KINDS; i++)
                        empty &= o->held[i] == 0;
                if (empty) {
                        *p = o->next;
                        free(o);
                }
        }
        pthread_mutex_unlock(&t->lock);
}

unsigned quota_held(quota_table *t, const char *owner, enum quota_kind k)
{
        pthread_mutex_lock(&t->lock);
        quota_owner *o = *find_locked(t, owner);
        unsigned n = o ? o->held[k] : 0;
        pthread_mutex_unlock(&t->lock);
        return n;
}
