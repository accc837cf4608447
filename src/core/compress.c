/*
 * compress.c - the compression state of a bucket (strataCompressor_t) and the codec specs of the
 * public API (include/strata.h, "Compression of the inter-node phase"). The codecs are in
 * src/codec/, the compressed inter-node step in src/coll/hier.c, the call in api.c.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "codec/codec.h"
#include "reduce/reduce.h"
#include "transports/transport.h"

#define ST_COMPRESS_INIT()                                                                       \
    do {                                                                                         \
        if (st_param_init(st_transport_config_tables()) != ST_OK) {                              \
            return strataInvalidArgument;                                                        \
        }                                                                                        \
    } while (0)

STRATA_API strataResult_t strataCompressParse(const char *spec, strataCompressParams_t *params)
{
    strataCompressParams_t p;
    const char            *why;

    ST_COMPRESS_INIT();
    if (spec == NULL || params == NULL) {
        st_error(ST_SUB_COLL, "strataCompressParse: %s is NULL", spec == NULL ? "spec" : "params");
        return strataInvalidArgument;
    }
    why = st_codec_parse(spec, &p); /* into a copy: *params is set only on success */
    if (why != NULL) {
        st_error(ST_SUB_COLL, "strataCompressParse: '%s': %s", spec, why);
        return strataInvalidArgument;
    }
    *params = p;
    return strataSuccess;
}

STRATA_API strataResult_t strataCompressFormat(const strataCompressParams_t *params, char *buf,
                                              size_t size)
{
    const char *why;

    ST_COMPRESS_INIT();
    if (params == NULL || buf == NULL) {
        st_error(ST_SUB_COLL, "strataCompressFormat: %s is NULL",
                 params == NULL ? "params" : "buf");
        return strataInvalidArgument;
    }
    why = st_codec_check(params);
    if (why != NULL) {
        st_error(ST_SUB_COLL, "strataCompressFormat: %s", why);
        return strataInvalidArgument;
    }
    if (!st_codec_format(params, buf, size)) {
        st_error(ST_SUB_COLL, "strataCompressFormat: %zu bytes do not hold the spec", size);
        return strataInvalidArgument;
    }
    return strataSuccess;
}

/* strataSuccess when params and datatype are fine for fn; else logs why and returns the error. */
static strataResult_t st_compress_check(const char *fn, const strataCompressParams_t *params,
                                        strataDataType_t datatype)
{
    const char *why;

    if (params == NULL) {
        st_error(ST_SUB_COLL, "%s: params is NULL", fn);
        return strataInvalidArgument;
    }
    why = st_codec_check(params);
    if (why != NULL) {
        st_error(ST_SUB_COLL, "%s: %s", fn, why);
        return strataInvalidArgument;
    }
    if ((unsigned)datatype >= strataNumTypes || !st_codec_dtype_ok(datatype)) {
        st_error(ST_SUB_COLL, "%s: datatype %s: the codecs take float, half and bfloat16", fn,
                 (unsigned)datatype < strataNumTypes ? st_dtype_name(datatype) : "(unknown)");
        return strataInvalidArgument;
    }
    return strataSuccess;
}

STRATA_API strataResult_t strataCompressWireBytes(const strataCompressParams_t *params,
                                                  size_t count, strataDataType_t datatype,
                                                  size_t *bytes)
{
    strataResult_t result;

    ST_COMPRESS_INIT();
    result = st_compress_check("strataCompressWireBytes", params, datatype);
    if (result != strataSuccess) {
        return result;
    }
    if (bytes == NULL) {
        st_error(ST_SUB_COLL, "strataCompressWireBytes: bytes is NULL");
        return strataInvalidArgument;
    }
    if (count > (UINT64_C(1) << 48) / st_dtype_size(datatype)) {
        st_error(ST_SUB_COLL, "strataCompressWireBytes: count %zu of %s overflows the address "
                 "space", count, st_dtype_name(datatype));
        return strataInvalidArgument;
    }
    *bytes = st_codec_wire_bytes(params, datatype, count);
    return strataSuccess;
}

STRATA_API strataResult_t strataCompressorCreate(strataCompressor_t *compressor,
                                                 const strataCompressParams_t *params,
                                                 size_t count, strataDataType_t datatype)
{
    static const char fn[] = "strataCompressorCreate";
    st_compressor_t  *c;
    strataResult_t    result;

    ST_COMPRESS_INIT();
    if (compressor == NULL) {
        st_error(ST_SUB_COLL, "%s: compressor is NULL", fn);
        return strataInvalidArgument;
    }
    *compressor = NULL;
    result = st_compress_check(fn, params, datatype);
    if (result != strataSuccess) {
        return result;
    }
    if (count == 0 || count > (UINT64_C(1) << 48) / st_dtype_size(datatype)) {
        st_error(ST_SUB_COLL, "%s: count %zu is not a bucket's element count", fn, count);
        return strataInvalidArgument;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return strataSystemError;
    }
    c->params = *params;
    c->count  = count;
    c->dtype  = datatype;
    if (params->errorFeedback) {
        c->residual = calloc(count, sizeof(float));
        if (c->residual == NULL) {
            st_error(ST_SUB_COLL, "%s: cannot allocate the residual (%zu B)", fn,
                     count * sizeof(float));
            free(c);
            return strataSystemError;
        }
    }
    *compressor = c;
    return strataSuccess;
}

STRATA_API strataResult_t strataCompressorReset(strataCompressor_t compressor)
{
    ST_COMPRESS_INIT();
    if (compressor == NULL) {
        st_error(ST_SUB_COLL, "strataCompressorReset: compressor is NULL");
        return strataInvalidArgument;
    }
    if (__atomic_load_n(&compressor->refs, __ATOMIC_ACQUIRE) > 0) {
        st_error(ST_SUB_COLL, "strataCompressorReset: %d calls using the compressor are queued "
                 "or running (synchronize their stream, or end their group, first)",
                 __atomic_load_n(&compressor->refs, __ATOMIC_ACQUIRE));
        return strataInvalidUsage;
    }
    if (compressor->residual != NULL) {
        memset(compressor->residual, 0, compressor->count * sizeof(float));
    }
    __atomic_store_n(&compressor->comm, NULL, __ATOMIC_RELEASE);
    return strataSuccess;
}

STRATA_API strataResult_t strataCompressorGetParams(strataCompressor_t compressor,
                                                    strataCompressParams_t *params)
{
    ST_COMPRESS_INIT();
    if (compressor == NULL || params == NULL) {
        st_error(ST_SUB_COLL, "strataCompressorGetParams: %s is NULL",
                 compressor == NULL ? "compressor" : "params");
        return strataInvalidArgument;
    }
    *params = compressor->params;
    return strataSuccess;
}

STRATA_API strataResult_t strataCompressorDestroy(strataCompressor_t compressor)
{
    if (compressor != NULL) {
        int refs = __atomic_load_n(&compressor->refs, __ATOMIC_ACQUIRE);

        if (refs > 0) {
            st_error(ST_SUB_COLL, "strataCompressorDestroy: %d calls using the compressor are "
                     "queued or running (synchronize their stream, or end their group, first); "
                     "nothing freed", refs);
            return strataInvalidUsage;
        }
        free(compressor->residual);
        free(compressor);
    }
    return strataSuccess;
}
