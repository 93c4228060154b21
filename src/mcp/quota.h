/* Per-owner quotas of `airlock serve`: what one owner (a tenant: what the
 * bearer tokens that name it own, or the one tenant of a server without
 * tokens) may hold at once, below the server-wide caps, so that one tenant
 * cannot take every session, run slot or place in the queue and leave the
 * other tenants nothing. One record per owner that holds anything, with a count
 * per kind: a later kind of quota is one more entry of quota_kind. */
#ifndef AIRLOCK_CLI_QUOTA_H
#define AIRLOCK_CLI_QUOTA_H

#include <stdbool.h>
#include <stddef.h>

enum quota_kind {
        QUOTA_SESSIONS, /* sessions open (forks count) */
        QUOTA_RUNS,     /* tools/call holding a run slot */
        QUOTA_QUEUED,   /* tools/call waiting for a run slot */
        QUOTA_KINDS
};

typedef struct quota_table quota_table;

/* An override's kind left to the table's limit (quota_set_overrides). */
#define QUOTA_UNSET (~0u)

/* A table whose every owner may hold limit[k] of each kind. Returns NULL
 * when out of memory. */
quota_table *quota_new(const unsigned limit[QUOTA_KINDS]);
void quota_free(quota_table *t);
/* Takes one of kind k for owner (NULL or "": the owner of a server without
 * tokens) if owner holds fewer than the limit. Returns 0; -EDQUOT when
 * owner holds its limit already; -ENOMEM. *held and *limit (either may be
 * NULL) are set to owner's own count before the call and its limit, and
 * to nothing of any other owner's, so that a refusal can name them. */
int quota_take(quota_table *t, const char *owner, enum quota_kind k, unsigned *held,
               unsigned *limit);
/* Gives back one of kind k that owner took. */
void quota_give(quota_table *t, const char *owner, enum quota_kind k);
/* Limits of their own for some owners (the tenants file's max-sessions,
 * max-runs and max-queue), replacing the table's for those owners: n
 * entries of owners[i] (a tenant name) and limits[i]. Replaces the
 * previous overrides whole (a reload); what owners hold is kept. Returns 0
 * or -ENOMEM (the previous overrides then stay). */
int quota_set_overrides(quota_table *t, const char *const *owners,
                        const unsigned (*limits)[QUOTA_KINDS], size_t n);
/* owner's limit of kind k, and (when overridden is not NULL) whether it is
 * an override, for a refusal's wording: it then names the tokens file's
 * setting, not the option. */
unsigned quota_limit(quota_table *t, const char *owner, enum quota_kind k, bool *overridden);
/* What owner holds of kind k now. */
unsigned quota_held(quota_table *t, const char *owner, enum quota_kind k);

#endif
