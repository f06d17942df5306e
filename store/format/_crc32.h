/* zlib's CRC-32 (java.util.zip.CRC32; RocketMQ's UtilAll.crc32 masks it to 31 bits) for the C passes
 * that write or check BODYCRC (ingest/encode/_direct_encode.c, store/scan/_record_check.c). Each
 * includes it and calls crc_init() once, when its module loads.
 *
 * libdeflate's libdeflate_crc32 (carry-less multiplication) when the machine has the library
 * (Debian's and Ubuntu's libdeflate0), found when the module loads, so that neither building nor
 * running needs it; else a table, sliced by 8. Both give zlib's value (tests/store/format/test_crc_library.py). */
#ifndef COMMITLOG_CRC32_H
#define COMMITLOG_CRC32_H

#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>

typedef uint32_t (*crc_library_fn)(uint32_t crc, const void *buffer, size_t len);

static uint32_t crc_table[8][256];
static crc_library_fn crc_library;      /* NULL: the table */

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    void *library = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
    if (library != NULL)
        crc_library = (crc_library_fn)dlsym(library, "libdeflate_crc32");
}

static uint32_t crc32_of_table(const uint8_t *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF]
            ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]]
            ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t crc32_of(const uint8_t *p, Py_ssize_t n) {
    return crc_library != NULL ? crc_library(0, p, (size_t)n) : crc32_of_table(p, n);
}

#endif
