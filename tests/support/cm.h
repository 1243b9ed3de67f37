/* CMocka with the headers it needs included first (cmocka.h does not
 * include them itself, and include sorting must not break that). */
#ifndef FA_TEST_CM_H
#define FA_TEST_CM_H

// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

/* |a - b| <= tol, printing both on failure (cmocka 1.1 has no double assert). */
#define assert_near(a, b, tol)                                                                   \
  do {                                                                                           \
    const double a_ = (a), b_ = (b);                                                             \
    if (!(a_ == b_) && !(__builtin_fabs(a_ - b_) <= (tol)))                                      \
      fail_msg("%s = %.17g, expected %s = %.17g (tolerance %g)", #a, a_, #b, b_, (double)(tol)); \
  } while (0)

#endif
