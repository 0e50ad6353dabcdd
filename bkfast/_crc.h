/* CRC-32 (zlib / java.util.zip.CRC32) and CRC-32C (Castagnoli) for bkfast._codec.
 *
 * Both functions use zlib's chaining convention: crc_update(crc_update(0, a), b) == crc_update(0, a||b),
 * where the value passed in and returned is the final (inverted) CRC.
 * CRC-32C uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time) and a
 * slicing-by-8 table otherwise, so the module builds and runs on any x86-64 or non-x86 machine.
 */
#ifndef BKFAST_CRC_H
#define BKFAST_CRC_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

static uint32_t bk_crc32c_table[8][256];
static uint32_t bk_crc32_table[8][256];
static int bk_crc_ready = 0;
static int bk_crc32c_hw = 0;

static void bk_fill_table(uint32_t table[8][256], uint32_t poly) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = table[0][i];
        for (int t = 1; t < 8; t++) {
            c = table[0][c & 0xff] ^ (c >> 8);
            table[t][i] = c;
        }
    }
}

static uint32_t bk_crc_slice8(uint32_t table[8][256], uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BK_HAVE_X86_CRC 1
__attribute__((target("sse4.2")))
static uint32_t bk_crc32c_sse42(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

static void bk_crc_init(void) {
    if (bk_crc_ready) return;
    bk_fill_table(bk_crc32c_table, 0x82F63B78u);
    bk_fill_table(bk_crc32_table, 0xEDB88320u);
#ifdef BK_HAVE_X86_CRC
    __builtin_cpu_init();
    bk_crc32c_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    bk_crc_ready = 1;
}

static uint32_t bk_crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef BK_HAVE_X86_CRC
    if (bk_crc32c_hw) return bk_crc32c_sse42(crc, p, n);
#endif
    return bk_crc_slice8(bk_crc32c_table, crc, p, n);
}

static uint32_t bk_crc32(uint32_t crc, const uint8_t *p, size_t n) {
    return bk_crc_slice8(bk_crc32_table, crc, p, n);
}

static int bk_crc32c_is_hardware(void) { return bk_crc32c_hw; }

#endif
