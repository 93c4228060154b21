/* Small helpers of the cmocka tests that use the library: a fresh
 * configuration, and files written with plain paths (workspaces and tools
 * files of their own, in folders they made; the hostile trees of the file
 * transfer tests are built with fsx_test.h instead, relative to a directory
 * fd). Every helper fails the current test on error. */
#ifndef AIRLOCK_TEST_H
#define AIRLOCK_TEST_H

#include <stdio.h>

#include "airlock.h"

/* A configuration with every default. */
static inline airlock_config *new_config(void)
{
        airlock_config *cfg = NULL;
        airlock_error err = {0};
        assert_int_equal(airlock_config_new(&cfg, &err), 0);
        return cfg;
}

/* Creates or replaces the file at path with text. */
static inline void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        assert_true(fputs(text, f) >= 0);
        assert_int_equal(fclose(f), 0);
}

#endif
