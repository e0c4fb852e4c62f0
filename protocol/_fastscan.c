/* The produce validator's per-message hot loops: uncompressed magic-1 messages (scan_v1) and the
 * records of one record batch (scan_v2); the one-batch produce path whole, checks, CRC-32C, scan
 * and the stamped copy, in one call (keep_v2: a Python call costs about as much as the rest of
 * a small batch's work); and the fetch path's down-conversion of a batch's records to magic-0/1
 * messages (legacy_messages).
 *
 * protocol/validator.py calls scan_v1() for a whole uncompressed set (or a wrapper's decompressed
 * inner set) and gets back one tuple, so a request costs one call, not one interpreter loop turn
 * per message. Sets of 64 KiB and more are scanned without the GIL: the buffer is held through
 * the buffer protocol, which also stops a bytearray from being resized underneath it. Anything
 * unusual or wrong makes it return None and leaves the precise answer to the validator's general
 * path, so this file only has to be right about accepting, never about error messages.
 *
 * Magic-1 message, big-endian, 34 bytes up to the value length when the key is null or empty:
 *   offset int64 @0, size int32 @8 (bytes after this field), crc uint32 @12 (CRC-32 of @16..end),
 *   magic int8 @16, attributes int8 @17, timestamp int64 @18, key length int32 @26, key,
 *   value length int32, value.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
/* CRC-32 (zlib's polynomial and values). With HAVE_LIBDEFLATE (setup.py finds its headers),
 * libdeflate's, which folds with PCLMULQDQ where the CPU has it: an order of magnitude faster
 * than zlib's, and the per-message CRC is most of this loop's time (bench/NOTES.md). Without it, slicing-by-8 tables built at import, so the extension needs nothing beyond a
 * C compiler. */
#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#define LOG_OVERHEAD 12
#define MIN_HEAD_V1 34
#define MIN_SIZE_V1 22
#define MAGIC_1_NO_ATTRS 0x0100
#define TIMESTAMP_TYPE_BIT 0x08
#define NO_TIMESTAMP (-1)
#define RELEASE_GIL_BYTES 65536

enum scan_mode { TOP_CREATE_TIME = 0, TOP_LOG_APPEND = 1, INNER = 2 };

static inline uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline int64_t get_i64(const unsigned char *p)
{
    return (int64_t)((uint64_t)get_u32(p) << 32 | get_u32(p + 4));
}

static inline void put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v;
}

static inline void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static inline void put_i64(unsigned char *p, int64_t v)
{
    put_u32(p, (uint32_t)((uint64_t)v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

/* Slicing-by-8 tables of a reflected CRC polynomial, and the CRC of a range by them (the
 * register starts and ends inverted, as zlib's CRC-32 and the crc32c package's CRC-32C do). */
typedef uint32_t crc_tables[8][256];

static void crc_tables_init(crc_tables table, uint32_t polynomial)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? polynomial ^ (c >> 1) : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = table[0][table[t - 1][i] & 0xFF] ^ (table[t - 1][i] >> 8);
}

static uint32_t crc_by_tables(const crc_tables table, const unsigned char *p, int64_t len)
{
    uint32_t c = 0xFFFFFFFFu;
    for (; len >= 8; p += 8, len -= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                           | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16
                      | (uint32_t)p[7] << 24;
        c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF]
            ^ table[4][lo >> 24] ^ table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF]
            ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
    }
    while (len-- > 0) c = table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#ifdef HAVE_LIBDEFLATE
static inline uint32_t crc_of(const unsigned char *p, int64_t len)
{
    return libdeflate_crc32(0, p, (size_t)len);
}

static void crc_init(void) {}
#else
static crc_tables crc_table;

static void crc_init(void) { crc_tables_init(crc_table, 0xEDB88320u); }

static inline uint32_t crc_of(const unsigned char *p, int64_t len)
{
    return crc_by_tables(crc_table, p, len);
}
#endif

/* CRC-32C (Castagnoli), a record batch's checksum: SSE4.2's crc32 instruction where the CPU has
 * it, else slicing-by-8 tables (the reflected polynomial 0x82F63B78), as the crc32c package
 * computes it. */
static crc_tables crc32c_table;
static int crc32c_by_cpu;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SSE42_CRC 1
__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(const unsigned char *p, int64_t len)
{
    uint64_t wide = 0xFFFFFFFFu;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = __builtin_ia32_crc32di(wide, word);
    }
    uint32_t c = (uint32_t)wide;
    while (len-- > 0) c = __builtin_ia32_crc32qi(c, *p++);
    return c ^ 0xFFFFFFFFu;
}
#endif

static void crc32c_init(void)
{
    crc_tables_init(crc32c_table, 0x82F63B78u);
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    crc32c_by_cpu = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc32c_of(const unsigned char *p, int64_t len, int by_cpu)
{
#ifdef HAVE_SSE42_CRC
    if (by_cpu) return crc32c_sse42(p, len);
#else
    (void)by_cpu;
#endif
    return crc_by_tables(crc32c_table, p, len);
}

PyDoc_STRVAR(crc32c_doc,
"crc32c(buffer, start, end, portable=False) -> int\n\n"
"CRC-32C of buffer[start:end] (a record batch's checksum covers attributes to its end), the range\n"
"cut to the buffer as a slice is, without the GIL from 64 KiB. portable: by the tables even where\n"
"the CPU has an instruction for it (the tests hold both to the crc32c package). ValueError for a\n"
"negative start or end.");

static PyObject *crc32c(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end;
    int portable = 0;
    if (!PyArg_ParseTuple(args, "y*nn|p", &view, &start, &end, &portable)) return NULL;
    if (start < 0 || end < 0) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "negative range %zd..%zd", start, end);
    }
    if (end > view.len) end = view.len;  /* as a slice: what is past the end is not there */
    if (start > end) start = end;
    const unsigned char *p = (const unsigned char *)view.buf + start;
    PyThreadState *released = end - start >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    uint32_t c = crc32c_of(p, end - start, crc32c_by_cpu && !portable);
    if (released) PyEval_RestoreThread(released);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

struct scan_result { int ok; int64_t count, max_ts, max_index; };

static struct scan_result scan(unsigned char *buf, int64_t n, int mode, int64_t first_offset,
                               int64_t lo, int64_t hi, int64_t max_size, int64_t now_ms, int keyed)
{
    struct scan_result r = {0, 0, NO_TIMESTAMP, -1};
    int64_t pos = 0, index = 0;
    while (pos + MIN_HEAD_V1 <= n) {
        unsigned char *m = buf + pos;
        int64_t size = (int32_t)get_u32(m + 8);
        if (size < MIN_SIZE_V1 || size > max_size) return r;
        int64_t end = pos + LOG_OVERHEAD + size;
        if (end > n || get_u16(m + 16) != MAGIC_1_NO_ATTRS) return r;
        if (crc_of(m + 16, size - 4) != get_u32(m + 12)) return r;
        int64_t ts = get_i64(m + 18);
        int64_t klen = (int32_t)get_u32(m + 26);
        int64_t vlen, rest;
        if (klen > 0) {
            if (pos + MIN_HEAD_V1 + klen > end) return r;
            vlen = (int32_t)get_u32(m + 30 + klen);
            rest = size - MIN_SIZE_V1 - klen;
        } else {
            if (klen < -1 || (klen == -1 && keyed)) return r;
            vlen = (int32_t)get_u32(m + 30);
            rest = size - MIN_SIZE_V1;
        }
        if (vlen != rest && (vlen != -1 || rest != 0)) return r;
        if (mode == TOP_LOG_APPEND) {
            put_i64(m, first_offset + index);
            m[17] = TIMESTAMP_TYPE_BIT;
            put_i64(m + 18, now_ms);
            put_u32(m + 12, crc_of(m + 16, size - 4));
        } else {
            if ((ts < lo || ts > hi) && ts != NO_TIMESTAMP) return r;
            if (ts > r.max_ts) { r.max_ts = ts; r.max_index = index; }
            if (mode == INNER) {
                if (get_i64(m) != index) return r;
            } else {
                put_i64(m, first_offset + index);
            }
        }
        index++;
        pos = end;
    }
    r.ok = pos == n && index > 0;
    r.count = index;
    return r;
}

/* Python ints beyond int64 (a limit of now + 2**63 - 1) saturate: no timestamp lies beyond them. */
static int saturating_i64(PyObject *obj, void *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return 0;
    *(int64_t *)out = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : (int64_t)v;
    return 1;
}

PyDoc_STRVAR(scan_v1_doc,
"scan_v1(buf, n, mode, first_offset, lo, hi, max_size, now_ms, keyed) -> (count, max_ts, max_index) | None\n\n"
"Check the uncompressed magic-1 messages filling buf[:n] and rewrite them in place per mode\n"
"(0: offsets from first_offset; 1: also LogAppendTime now_ms, attribute bit 3 and CRC; 2: inner\n"
"messages, relative offsets must be 0..count-1, nothing written). Timestamps other than -1 must\n"
"lie in [lo, hi] (modes 0 and 2). max_index is the index of the first message holding max_ts\n"
"(-1 with max_ts -1). Returns None at the first thing it does not accept; buf may then be\n"
"partly rewritten. Raises TypeError for a read-only buffer in modes 0 and 1 and ValueError for\n"
"n outside the buffer or an unknown mode.");

static PyObject *scan_v1(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n;
    int mode, keyed;
    int64_t first_offset, lo, hi, max_size, now_ms;
    if (!PyArg_ParseTuple(args, "y*niO&O&O&O&O&p", &view, &n, &mode,
                          saturating_i64, &first_offset, saturating_i64, &lo,
                          saturating_i64, &hi, saturating_i64, &max_size,
                          saturating_i64, &now_ms, &keyed))
        return NULL;
    if (n < 0 || n > view.len) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "n=%zd outside the buffer of %zd bytes", n, view.len);
    }
    if (mode < TOP_CREATE_TIME || mode > INNER) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "unknown scan mode %d", mode);
    }
    if (view.readonly && mode != INNER) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_TypeError, "scan mode %d rewrites the buffer: it must be writable", mode);
    }
    /* Giving the GIL away and waiting to get it back costs more than scanning a small set. */
    PyThreadState *released = n >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    struct scan_result r = scan(view.buf, n, mode, first_offset, lo, hi, max_size, now_ms, keyed);
    if (released) PyEval_RestoreThread(released);
    PyBuffer_Release(&view);
    if (!r.ok) Py_RETURN_NONE;
    return Py_BuildValue("(LLL)", (long long)r.count, (long long)r.max_ts, (long long)r.max_index);
}

/* Record batches (magic 2): the records section of one batch, decompressed, as laid out in
 * protocol/recordbatch.py:
 *   record = length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 *            keyLength varint (-1 null), key, valueLength varint (-1 null), value,
 *            headersCount varint, headers[keyLength varint, key, valueLength varint, value]
 * Varints are zig-zag base-128, at most 10 bytes. */
static inline int read_varint(const unsigned char *p, int64_t end, int64_t *pos, int64_t *out)
{
    int64_t i = *pos;
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (i >= end) return 0;
        unsigned char b = p[i++];
        /* Bits past the 64th: Python reads a larger number than int64 holds; leave it to it. */
        if (shift == 63 && (b & 0x7E)) return 0;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = i;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 1;
        }
    }
    return 0;
}

/* Skip a length-prefixed field; null (-1) only where allowed. */
static inline int skip_field(const unsigned char *p, int64_t end, int64_t *pos, int nullable)
{
    int64_t len;
    if (!read_varint(p, end, pos, &len)) return 0;
    if (len == -1) return nullable;
    if (len < 0 || len > end - *pos) return 0;
    *pos += len;
    return 1;
}

struct scan2_result { int ok; int64_t max_ts; };

static struct scan2_result scan2(const unsigned char *p, int64_t n, int64_t count,
                                 int64_t base_ts, int64_t lo, int64_t hi, int check_time,
                                 int keyed)
{
    struct scan2_result r = {0, NO_TIMESTAMP};
    int64_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t len, ts_delta, offset_delta, key_len, headers;
        if (!read_varint(p, n, &pos, &len) || len < 0 || len > n - pos) return r;
        int64_t end = pos + len;
        if (pos >= end) return r;
        pos++;  /* record attributes: unused */
        if (!read_varint(p, end, &pos, &ts_delta) || !read_varint(p, end, &pos, &offset_delta))
            return r;
        if (offset_delta != i) return r;
        int64_t ts = base_ts + ts_delta;
        if (check_time && ts != NO_TIMESTAMP && (ts < lo || ts > hi)) return r;
        if (ts > r.max_ts) r.max_ts = ts;
        if (!read_varint(p, end, &pos, &key_len)) return r;
        if (key_len == -1) {
            if (keyed) return r;
        } else {
            if (key_len < 0 || key_len > end - pos) return r;
            pos += key_len;
        }
        if (!skip_field(p, end, &pos, 1)) return r;
        if (!read_varint(p, end, &pos, &headers) || headers < 0) return r;
        for (int64_t h = 0; h < headers; h++) {
            if (!skip_field(p, end, &pos, 0) || !skip_field(p, end, &pos, 1)) return r;
        }
        if (pos != end) return r;
    }
    r.ok = pos == n && count > 0;
    return r;
}

PyDoc_STRVAR(scan_v2_doc,
"scan_v2(records, count, base_ts, lo, hi, check_time, keyed) -> max_ts | None\n\n"
"Check the uncompressed records section of one record batch: exactly count records filling it,\n"
"offset deltas 0..count-1, every length inside its record, and (check_time) every timestamp\n"
"base_ts + delta other than -1 within [lo, hi]; keyed refuses null keys. Returns the largest\n"
"record timestamp, or None at the first thing it does not accept (the validator's Python path\n"
"then gives the precise error). Reads only; scans without the GIL from 64 KiB.");

static PyObject *scan_v2(PyObject *module, PyObject *args)
{
    Py_buffer view;
    long long count;
    int check_time, keyed;
    int64_t base_ts, lo, hi;
    if (!PyArg_ParseTuple(args, "y*LO&O&O&pp", &view, &count, saturating_i64, &base_ts,
                          saturating_i64, &lo, saturating_i64, &hi, &check_time, &keyed))
        return NULL;
    PyThreadState *released = view.len >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    struct scan2_result r = scan2(view.buf, view.len, count, base_ts, lo, hi, check_time, keyed);
    if (released) PyEval_RestoreThread(released);
    PyBuffer_Release(&view);
    if (!r.ok) Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)r.max_ts);
}

/* A record batch's header (protocol/recordbatch.py), big-endian, 61 bytes before its records:
 *   baseOffset int64 @0, batchLength int32 @8, partitionLeaderEpoch int32 @12, magic int8 @16,
 *   crc uint32 @17 (CRC-32C of @21..end), attributes int16 @21, lastOffsetDelta int32 @23,
 *   baseTimestamp int64 @27, maxTimestamp int64 @35, producerId int64 @43,
 *   producerEpoch int16 @51, baseSequence int32 @53, recordsCount int32 @57. */
#define BATCH_OVERHEAD 61
#define CODEC_BITS 0x07
#define CODEC_ZSTD 4
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20

PyDoc_STRVAR(keep_v2_doc,
"keep_v2(batch, records, next_offset, leader_epoch, lo, hi, check_time, keyed, max_bytes,\n"
"        target_codec, lat_ms)\n"
"    -> (stored, count, max_ts, producer_id, producer_epoch, base_sequence, last_sequence,\n"
"        transactional) | None\n\n"
"The validator's one-batch path (protocol/validator.py _one_batch_kept) in one call. batch must\n"
"be exactly one magic-2 batch as a producer sends it: its length, at most max_bytes, codec at\n"
"most zstd and target_codec's unless that is -1, neither control nor LogAppendTime, records\n"
"count > 0 and lastOffsetDelta count - 1, a producer id's sequence and epoch >= 0 (no producer\n"
"id: not transactional), its CRC-32C; and its records must pass scan_v2's checks: the batch's\n"
"own section when records is None (codec none only), else records, that section decompressed.\n"
"Returns a copy stamped with base offset next_offset and leader_epoch, and either LogAppendTime\n"
"lat_ms (lat_ms >= 0) or, as Kafka does, a header max timestamp its records disagree with\n"
"corrected, the CRC-32C recomputed when the header changed; max_ts as stored; last_sequence is\n"
"base_sequence + lastOffsetDelta wrapped at 2**31. None for anything else: the general path\n"
"then answers precisely. Checks and copies without the GIL from 64 KiB.");

static PyObject *keep_v2(PyObject *module, PyObject *args)
{
    Py_buffer batch, records;
    PyObject *records_obj, *out = NULL;
    long long next_offset, max_bytes, lat_ms;
    int leader_epoch, check_time, keyed, target_codec;
    int64_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*OLiO&O&ppLiL", &batch, &records_obj, &next_offset,
                          &leader_epoch, saturating_i64, &lo, saturating_i64, &hi, &check_time,
                          &keyed, &max_bytes, &target_codec, &lat_ms))
        return NULL;
    int has_records = records_obj != Py_None;
    if (has_records && PyObject_GetBuffer(records_obj, &records, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&batch);
        return NULL;
    }
    const unsigned char *b = batch.buf;
    int64_t n = batch.len;
    int64_t count = 0, max_ts = NO_TIMESTAMP, producer_id = -1, base_sequence = -1, last_delta = 0;
    int producer_epoch = -1, attributes = 0, ok = n >= BATCH_OVERHEAD && b[16] == 2;
    if (ok) {
        attributes = (int16_t)get_u16(b + 21);
        last_delta = (int32_t)get_u32(b + 23);
        max_ts = get_i64(b + 35);
        producer_id = get_i64(b + 43);
        producer_epoch = (int16_t)get_u16(b + 51);
        base_sequence = (int32_t)get_u32(b + 53);
        count = (int32_t)get_u32(b + 57);
        int codec = attributes & CODEC_BITS;
        ok = (int32_t)get_u32(b + 8) == n - LOG_OVERHEAD && n <= max_bytes && codec <= CODEC_ZSTD
             && !(attributes & (CONTROL_BIT | TIMESTAMP_TYPE_BIT)) && count > 0
             && last_delta == count - 1 && (target_codec < 0 || target_codec == codec)
             && (codec != 0) == has_records
             && (producer_id >= 0 ? base_sequence >= 0 && producer_epoch >= 0
                                  : !(attributes & TRANSACTIONAL_BIT));
    }
    if (ok) out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (out != NULL) {
        const unsigned char *section = has_records ? records.buf : b + BATCH_OVERHEAD;
        int64_t section_len = has_records ? records.len : n - BATCH_OVERHEAD;
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        int release = n + section_len >= RELEASE_GIL_BYTES;
        PyThreadState *released = release ? PyEval_SaveThread() : NULL;
        ok = crc32c_of(b + 21, n - 21, crc32c_by_cpu) == get_u32(b + 17);
        struct scan2_result r = {0, NO_TIMESTAMP};
        if (ok) r = scan2(section, section_len, count, get_i64(b + 27), lo, hi, check_time, keyed);
        ok = ok && r.ok;
        if (ok) {
            memcpy(o, b, (size_t)n);
            put_i64(o, next_offset);
            put_u32(o + 12, (uint32_t)leader_epoch);
            int64_t stored = lat_ms >= 0 ? lat_ms : r.max_ts;
            if (lat_ms >= 0) put_u16(o + 21, (uint16_t)(attributes | TIMESTAMP_TYPE_BIT));
            if (lat_ms >= 0 || stored != max_ts) {
                put_i64(o + 35, stored);
                put_u32(o + 17, crc32c_of(o + 21, n - 21, crc32c_by_cpu));
            }
            max_ts = stored;
        }
        if (released) PyEval_RestoreThread(released);
        if (!ok) Py_CLEAR(out);
    }
    if (has_records) PyBuffer_Release(&records);
    PyBuffer_Release(&batch);
    if (out == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NLLLiLLO)", out, (long long)count, (long long)max_ts,
                         (long long)producer_id, producer_epoch, (long long)base_sequence,
                         (long long)((base_sequence + last_delta) & 0x7FFFFFFF),
                         attributes & TRANSACTIONAL_BIT ? Py_True : Py_False);
}

/* Where each record's fields lie, for readers that gather columns without a Python object per
 * record (pyspark_chronolog/arrow.py). Eight int64 per record, in this order: */
enum { POS_TS_DELTA, POS_OFFSET_DELTA, POS_KEY_START, POS_KEY_LEN, POS_VALUE_START,
       POS_VALUE_LEN, POS_HEADERS_START, POS_HEADER_COUNT, POS_FIELDS };

static int positions(const unsigned char *p, int64_t start, int64_t n, int64_t count,
                     int64_t *out)
{
    int64_t pos = start;
    for (int64_t i = 0; i < count; i++, out += POS_FIELDS) {
        int64_t len;
        if (!read_varint(p, n, &pos, &len) || len < 0 || len > n - pos) return 0;
        int64_t end = pos + len;
        if (pos >= end) return 0;
        pos++;  /* record attributes: unused */
        if (!read_varint(p, end, &pos, &out[POS_TS_DELTA])
            || !read_varint(p, end, &pos, &out[POS_OFFSET_DELTA])) return 0;
        for (int f = POS_KEY_START; f <= POS_VALUE_START; f += 2) {
            int64_t flen;
            if (!read_varint(p, end, &pos, &flen) || flen < -1 || flen > end - pos) return 0;
            out[f] = pos;
            out[f + 1] = flen;
            if (flen > 0) pos += flen;
        }
        if (!read_varint(p, end, &pos, &out[POS_HEADER_COUNT]) || out[POS_HEADER_COUNT] < 0)
            return 0;
        out[POS_HEADERS_START] = pos;
        for (int64_t h = 0; h < out[POS_HEADER_COUNT]; h++) {
            if (!skip_field(p, end, &pos, 0) || !skip_field(p, end, &pos, 1)) return 0;
        }
        if (pos != end) return 0;
    }
    return pos == n;
}

PyDoc_STRVAR(record_positions_doc,
"record_positions(buffer, start, end, count) -> bytes | None\n\n"
"The records section buffer[start:end] of one record batch holding count records, as count x 8\n"
"native int64: timestamp delta, offset delta, key start and length (-1 null), value start and\n"
"length (-1 null), headers start, header count; positions index buffer. None when the section\n"
"is malformed (protocol.recordbatch.record_positions then raises the precise error).");

static PyObject *record_positions(PyObject *module, PyObject *args)
{
    Py_buffer view;
    long long start, end, count;
    if (!PyArg_ParseTuple(args, "y*LLL", &view, &start, &end, &count))
        return NULL;
    if (start < 0 || end < start || end > view.len || count < 0
            || count > (end - start) / 3 + 1) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * POS_FIELDS * 8));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int ok = positions(view.buf, start, end, count, (int64_t *)PyBytes_AS_STRING(out));
    PyBuffer_Release(&view);
    if (!ok) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* Down-conversion (Fetch v0-v3 readers): the records of one batch as magic-0/1 messages, laid
 * out as in the header comment (magic 0 has no timestamp: 26 bytes up to the value length).
 * Pass one checks the records and sizes the output, pass two writes it; both run without the
 * GIL from 64 KiB, so the loop and other threads run while a large fetch is converted. */
struct legacy_params {
    int magic, attrs, relative, lat;
    int64_t count, base_offset, base_ts, lat_ts;
};

struct legacy_result { int ok; int64_t size, first, last, max_ts; };

static struct legacy_result legacy(const unsigned char *p, int64_t n,
                                   const struct legacy_params *a, unsigned char *out)
{
    struct legacy_result r = {0, 0, 0, 0, NO_TIMESTAMP};
    int64_t pos = 0, head = a->magic == 1 ? MIN_SIZE_V1 : MIN_SIZE_V1 - 8;
    for (int64_t i = 0; i < a->count; i++) {
        int64_t len, ts_delta, offset_delta, key_len, value_len, headers, offset, ts;
        if (!read_varint(p, n, &pos, &len) || len < 0 || len > n - pos) return r;
        int64_t end = pos + len;
        if (pos >= end) return r;
        pos++;  /* record attributes: unused */
        if (!read_varint(p, end, &pos, &ts_delta) || !read_varint(p, end, &pos, &offset_delta))
            return r;
        if (__builtin_add_overflow(a->base_offset, offset_delta, &offset)) return r;
        if (i == 0) r.first = offset;
        r.last = offset;
        if (a->relative && __builtin_sub_overflow(offset, r.first, &offset)) return r;
        ts = NO_TIMESTAMP;
        if (a->magic == 1) {
            if (a->lat) ts = a->lat_ts;
            else if (__builtin_add_overflow(a->base_ts, ts_delta, &ts)) return r;
            if (ts > r.max_ts) r.max_ts = ts;
        }
        int64_t key_at, value_at;
        if (!read_varint(p, end, &pos, &key_len) || key_len < -1 || key_len > end - pos) return r;
        key_at = pos;
        if (key_len > 0) pos += key_len;
        if (!read_varint(p, end, &pos, &value_len) || value_len < -1 || value_len > end - pos)
            return r;
        value_at = pos;
        if (value_len > 0) pos += value_len;
        if (!read_varint(p, end, &pos, &headers) || headers < 0) return r;
        for (int64_t h = 0; h < headers; h++) {
            if (!skip_field(p, end, &pos, 0) || !skip_field(p, end, &pos, 1)) return r;
        }
        if (pos != end) return r;
        int64_t kbytes = key_len > 0 ? key_len : 0, vbytes = value_len > 0 ? value_len : 0;
        int64_t size = head + kbytes + vbytes;
        if (size > INT32_MAX) return r;
        if (out != NULL) {
            unsigned char *m = out + r.size;
            put_i64(m, offset);
            put_u32(m + 8, (uint32_t)size);
            m[16] = (unsigned char)a->magic;
            m[17] = (unsigned char)a->attrs;
            unsigned char *f = m + 18;
            if (a->magic == 1) { put_i64(f, ts); f += 8; }
            put_u32(f, (uint32_t)key_len);
            memcpy(f + 4, p + key_at, (size_t)kbytes);
            f += 4 + kbytes;
            put_u32(f, (uint32_t)value_len);
            memcpy(f + 4, p + value_at, (size_t)vbytes);
            put_u32(m + 12, crc_of(m + 16, size - 4));
        }
        r.size += LOG_OVERHEAD + size;
    }
    r.ok = pos == n && a->count > 0;
    return r;
}

PyDoc_STRVAR(legacy_messages_doc,
"legacy_messages(records, count, magic, attrs, relative, base_offset, base_ts, lat, lat_ts)\n"
"    -> (messages, first_offset, last_offset, max_ts) | None\n\n"
"The uncompressed records section of one record batch (count records) as magic-0/1 messages,\n"
"each with attributes attrs and a correct CRC-32; headers are dropped. Offsets are base_offset +\n"
"delta, relative to the first record's when relative; magic-1 timestamps are lat_ts when lat\n"
"(LogAppendTime), else base_ts + delta. max_ts is the largest written (-1 at magic 0). None when\n"
"the section is malformed (protocol.records then raises the precise error).");

static PyObject *legacy_messages(PyObject *module, PyObject *args)
{
    Py_buffer view;
    struct legacy_params a;
    long long count, base_offset, base_ts, lat_ts;
    if (!PyArg_ParseTuple(args, "y*LiipLLpL", &view, &count, &a.magic, &a.attrs, &a.relative,
                          &base_offset, &base_ts, &a.lat, &lat_ts))
        return NULL;
    a.count = count; a.base_offset = base_offset; a.base_ts = base_ts; a.lat_ts = lat_ts;
    if ((a.magic != 0 && a.magic != 1) || a.attrs < 0 || a.attrs > 255) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "magic %d / attributes %d cannot be written",
                            a.magic, a.attrs);
    }
    int release = view.len >= RELEASE_GIL_BYTES;
    PyThreadState *released = release ? PyEval_SaveThread() : NULL;
    struct legacy_result sized = legacy(view.buf, view.len, &a, NULL);
    if (released) PyEval_RestoreThread(released);
    PyObject *out = NULL;
    if (sized.ok) out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sized.size);
    if (out != NULL) {
        released = release ? PyEval_SaveThread() : NULL;
        legacy(view.buf, view.len, &a, (unsigned char *)PyBytes_AS_STRING(out));
        if (released) PyEval_RestoreThread(released);
    }
    PyBuffer_Release(&view);
    if (!sized.ok) Py_RETURN_NONE;
    if (out == NULL) return NULL;
    return Py_BuildValue("(NLLL)", out, (long long)sized.first, (long long)sized.last,
                         (long long)sized.max_ts);
}

PyDoc_STRVAR(extend_doc,
"extend(out, data) -> None\n\n"
"out += data for a bytearray out, the copy made without the GIL from 64 KiB: the validator\n"
"copies a large batch it keeps as sent (tens of MB) into the records it appends, which as a\n"
"Python += would hold the GIL, and so the event loop, for milliseconds.");

static PyObject *extend(PyObject *module, PyObject *args)
{
    PyObject *out;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "O!y*", &PyByteArray_Type, &out, &data)) return NULL;
    Py_ssize_t start = PyByteArray_GET_SIZE(out);
    if (data.len > PY_SSIZE_T_MAX - start || PyByteArray_Resize(out, start + data.len) < 0) {
        PyBuffer_Release(&data);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    /* out is this thread's: resizing it needs the GIL, and its new bytes are not yet read. */
    char *dst = PyByteArray_AS_STRING(out) + start;
    PyThreadState *released = data.len >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    memcpy(dst, data.buf, (size_t)data.len);
    if (released) PyEval_RestoreThread(released);
    PyBuffer_Release(&data);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"crc32c", crc32c, METH_VARARGS, crc32c_doc},
    {"extend", extend, METH_VARARGS, extend_doc},
    {"keep_v2", keep_v2, METH_VARARGS, keep_v2_doc},
    {"legacy_messages", legacy_messages, METH_VARARGS, legacy_messages_doc},
    {"scan_v1", scan_v1, METH_VARARGS, scan_v1_doc},
    {"scan_v2", scan_v2, METH_VARARGS, scan_v2_doc},
    {"record_positions", record_positions, METH_VARARGS, record_positions_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "protocol._fastscan",
    "Native hot loops: the produce validator's scans, one-batch path and large copies "
    "(protocol/validator.py), CRC-32C (protocol/recordbatch.py), record positions for columnar "
    "readers and down-conversion (protocol/records.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__fastscan(void)
{
    crc_init();
    crc32c_init();
    return PyModule_Create(&module);
}
