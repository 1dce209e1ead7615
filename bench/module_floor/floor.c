/* The cheapest counter a Redis module can have, for bench/module_floor.sh: `FLOOR.INCR key n`
 * does only what every module write of a counter must do through the module API (open the
 * key, check its type, parse the increment, add it in place, replicate the command, signal
 * the key and send a keyspace event, reply), and nothing else: no overflow check, no
 * persistence (its values are not saved), no shards, tokens or bounds. Its ops/s against
 * INCRBY's is the highest ratio any module's add can reach on the server it runs on.
 * A measuring tool only: never load it beside data you keep. */
#define REDISMODULE_MAIN
#include "redismodule.h"
#include <stdlib.h>

static RedisModuleType *floor_type;

static void floor_free(void *value) { free(value); }
static void *floor_load(RedisModuleIO *rdb, int encver) {
    (void)rdb;
    (void)encver;
    return NULL;
}
static void floor_save(RedisModuleIO *rdb, void *value) {
    (void)rdb;
    (void)value;
}

static int floor_incr(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long delta;
    if (argc != 3) return RedisModule_WrongArity(ctx);
    if (RedisModule_StringToLongLong(argv[2], &delta) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR increment is not an integer");
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    long long *value;
    if (RedisModule_ModuleTypeGetType(key) == floor_type) {
        value = RedisModule_ModuleTypeGetValue(key);
    } else if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) {
        value = calloc(1, sizeof(*value));
        RedisModule_ModuleTypeSetValue(key, floor_type, value);
    } else {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    *value += delta;
    long long now = *value;
    RedisModule_CloseKey(key);
    RedisModule_ReplicateVerbatim(ctx);
    RedisModule_SignalModifiedKey(ctx, argv[1]);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor.incr", argv[1]);
    return RedisModule_ReplyWithLongLong(ctx, now);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "floor", 1, REDISMODULE_APIVER_1) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    RedisModule_SetModuleOptions(ctx, REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
    RedisModuleTypeMethods methods = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = floor_load,
        .rdb_save = floor_save,
        .free = floor_free,
    };
    floor_type = RedisModule_CreateDataType(ctx, "floor-cnt", 0, &methods);
    if (floor_type == NULL) return REDISMODULE_ERR;
    return RedisModule_CreateCommand(ctx, "floor.incr", floor_incr, "write deny-oom fast", 1, 1, 1);
}
