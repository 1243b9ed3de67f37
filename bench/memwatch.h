/* Peak extra memory of one call: how far the process' resident set rose
 * above where it stood before the call. Linux keeps the peak (VmHWM in
 * /proc/self/status) and resets it to the current size when "5" is
 * written to /proc/self/clear_refs, so peak - before = what the call added
 * at its worst moment: the library's (or eager's) scratch, since inputs
 * and outputs were resident already. Page-granular; memory a call takes
 * from pages the allocator already holds is not seen, so the bench asks
 * glibc to serve every allocation above 64 KiB with fresh pages (mmap) and
 * to return them on free. Elsewhere: unknown (-1). */
#ifndef FA_BENCH_MEMWATCH_H
#define FA_BENCH_MEMWATCH_H

typedef struct fa_memwatch {
  long before_kb; /* VmRSS when the watch started; < 0 if unavailable */
} fa_memwatch;

/* Once, before anything is measured: the allocator settings above. */
void fa_memwatch_prepare(void);
/* Resets the peak and notes the current resident size. */
void fa_memwatch_start(fa_memwatch *w);
/* Bytes the peak rose above the start; -1 if this OS does not say. */
double fa_memwatch_stop(const fa_memwatch *w);
/* One line saying how it is measured (for the reports). */
const char *fa_memwatch_method(void);

#endif
