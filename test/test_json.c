/*
 * test_json.c: the JSON parser (llmc/json.h).
 * - valid documents: every kind of value, integers exact to int64's limits, every escape (\uXXXX with surrogate
 *   pairs, \u0000 inside a string), raw UTF-8, nesting up to the limit, member order;
 * - malformed documents: each refused with what is wrong and the byte where it was found, never a crash; a key
 *   given twice in one object (as written or through escapes) is refused at its first repeat;
 * - each value's text as written (json_source): 2.0 stays 2.0, a string keeps its quotes, one line, cut with "...";
 * - writing: json_text_string's escapes read back as the string written.
 */
#include "../llmc/json.h"
#include "test_util.h"

static int parse(const char *s, JsonValue *v) {
    JsonError err;
    return json_parse(s, strlen(s), v, &err);
}

static void test_scalars(void) {
    JsonValue v;
    int ok = parse(" null ", &v);
    check(ok && v.type == JSON_NULL, "json_null", "parsed %d, type %d", ok, v.type);
    ok = parse("true", &v);
    check(ok && v.type == JSON_BOOL && v.boolean == 1, "json_true", "parsed %d, type %d", ok, v.type);
    ok = parse("\tfalse\n", &v);
    check(ok && v.type == JSON_BOOL && v.boolean == 0, "json_false", "parsed %d, type %d", ok, v.type);

    static const struct {
        const char *text;
        double number;
        int is_int;
        long long integer;
    } nums[] = {
        {"0", 0, 1, 0},
        {"-0", 0, 1, 0},
        {"123", 123, 1, 123},
        {"-45", -45, 1, -45},
        {"1.5", 1.5, 0, 0},
        {"1e3", 1000, 0, 0},
        {"-2.5E-3", -0.0025, 0, 0},
        {"1e-05", 1e-5, 0, 0},
        {"9223372036854775807", 9223372036854775807.0, 1, LLONG_MAX},
        {"-9223372036854775808", -9223372036854775808.0, 1, LLONG_MIN},
        {"9223372036854775808", 9223372036854775808.0, 0, 0}, // one past int64: a number, not an exact integer
        {"9007199254740993", 9007199254740992.0, 1, 9007199254740993LL}, // 2^53 + 1: exact only as an integer
    };
    ok = 1;
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        int good = parse(nums[i].text, &v) && v.type == JSON_NUMBER && v.number == nums[i].number &&
                   v.is_int == nums[i].is_int && (!v.is_int || v.integer == nums[i].integer);
        if (!good) {
            printf("  number '%s': number %.17g is_int %d integer %lld\n", nums[i].text, v.number, v.is_int,
                   v.integer);
        }
        ok &= good;
    }
    check(ok, "json_numbers", "a number parsed wrong (above)");
}

static void test_strings(void) {
    static const struct {
        const char *text, *want;
        size_t len;
    } strs[] = {
        {"\"plain\"", "plain", 5},
        {"\"\"", "", 0},
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8},
        {"\"\\u0041\\u00e9\\u20AC\"", "A\xc3\xa9\xe2\x82\xac", 6},           // 1, 2 and 3 UTF-8 bytes
        {"\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4},                        // a surrogate pair: U+1F600
        {"\"a\\u0000b\"", "a\0b", 3},                                          // a NUL inside
        {"\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", "caf\xc3\xa9 \xf0\x9f\x98\x80", 10}, // raw UTF-8 as is
        {"\"\xc4\xa0the\"", "\xc4\xa0the", 5},                                // GPT-2's 'Ġthe'
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        JsonValue v;
        int good = parse(strs[i].text, &v) && v.type == JSON_STRING && v.len == strs[i].len &&
                   memcmp(v.str, strs[i].want, v.len) == 0 && v.str[v.len] == '\0';
        if (!good) { printf("  string %zu ('%s') parsed wrong\n", i, strs[i].text); }
        ok &= good;
        json_free(&v);
    }
    check(ok, "json_strings_and_escapes", "a string parsed wrong (above)");
}

static void test_containers(void) {
    JsonValue v;
    const char *doc = "{\"a\": [1, 2.5, \"x\", null, true, {}], \"b\": {\"c\": {\"d\": []}}, \"ab\": 7, \"\": 0}";
    int ok = parse(doc, &v) && v.type == JSON_OBJECT && v.count == 4;
    const JsonValue *a = json_get(&v, "a"), *b = json_get(&v, "b");
    ok = ok && a && a->type == JSON_ARRAY && a->count == 6 && a->items[0].integer == 1 && a->items[1].number == 2.5 &&
         json_is_string(&a->items[2], "x") && a->items[3].type == JSON_NULL && a->items[4].boolean == 1 &&
         a->items[5].type == JSON_OBJECT && a->items[5].count == 0;
    ok = ok && b && json_get(json_get(b, "c"), "d") && json_get(json_get(b, "c"), "d")->type == JSON_ARRAY;
    ok = ok && strcmp(v.items[2].key, "ab") == 0 && v.items[2].integer == 7; // members in order
    ok = ok && json_get(&v, "") && !json_get(&v, "missing") && !json_get(a, "a");
    check(ok, "json_containers", "the document's tree is not what was written");
    json_free(&v);

    // exactly the depth limit parses; one more level is refused
    char deep[2 * (JSON_MAX_DEPTH + 1) + 1];
    for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
        for (int i = 0; i < depth; i++) {
            deep[i] = '[';
            deep[2 * depth - 1 - i] = ']';
        }
        deep[2 * depth] = '\0';
        JsonError err;
        int parsed = json_parse(deep, strlen(deep), &v, &err);
        if (depth == JSON_MAX_DEPTH) {
            check(parsed, "json_depth_limit_ok", "%d levels refused: %s", depth, err.what);
            json_free(&v);
        } else {
            check(!parsed && strstr(err.what, "nesting deeper than 64") && err.pos == JSON_MAX_DEPTH,
                  "json_depth_limit_refused", "%d levels: parsed %d, error '%s' at %zu", depth, parsed, err.what,
                  err.pos);
        }
    }
}

static void test_malformed(void) {
    static const struct {
        const char *text;
        const char *what;
        size_t pos;
    } bad[] = {
        {"", "empty document", 0},
        {"   ", "empty document", 3},
        {"{", "expected a string key", 1},
        {"[1,]", "unexpected character", 3},
        {"[1 2]", "expected ',' or ']'", 3},
        {"{\"a\" 1}", "expected ':'", 5},
        {"{\"a\":1,}", "expected a string key", 7},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}'", 7},
        {"{1:2}", "expected a string key", 1},
        {"01", "may not start with 0", 1},
        {"1.", "digit must follow the decimal point", 2},
        {"-", "needs a digit", 1},
        {"1e", "exponent needs a digit", 2},
        {"+1", "unexpected character", 0},
        {".5", "unexpected character", 0},
        {"tru", "unexpected character", 0},
        {"nul", "unexpected character", 0},
        {"True", "unexpected character", 0},
        {"\"abc", "unterminated string", 4},
        {"\"a\x01\"", "control character", 2},
        {"\"a\nb\"", "control character", 2},
        {"\"\\x\"", "unknown escape", 2},
        {"\"\\u12\"", "bad hex digit", 5},
        {"\"\\u12", "truncated \\u escape", 5},
        {"\"\\ud83d\"", "high surrogate without its low half", 7},
        {"\"\\ud83d\\u0041\"", "high surrogate without its low half", 13},
        {"\"\\ude00\"", "unpaired low surrogate", 7},
        {"\"\xff\"", "invalid UTF-8", 1},
        {"\"\xc0\xaf\"", "invalid UTF-8", 1},       // an overlong '/'
        {"\"\xed\xa0\x80\"", "invalid UTF-8", 1},   // a surrogate encoded in UTF-8
        {"\"\xe2\x82\"", "invalid UTF-8", 1},       // a truncated sequence
        {"[1] x", "trailing characters", 4},
        {"{} {}", "trailing characters", 3},
        {"1234567890123456789012345678901234567890123456789012345678901234567890", "number longer than 64", 0},
        {"{\"a\":1,\"b\":2,\"a\":3}", "duplicate key \"a\"", 13},
        {"{\"x\":{\"k\":1,\"k\":2}}", "duplicate key \"k\"", 12},
        {"{\"a\":1,\"b\":1,\"b\":2,\"a\":3}", "duplicate key \"b\"", 13}, // the first repeat in the document
        {"{\"a\":1,\"\\u0061\":2}", "duplicate key \"a\"", 7},             // the same key through an escape
        {"[{\"a\":1},{\"a\":1,\"a\":1}]", "duplicate key \"a\"", 16},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        JsonValue v;
        JsonError err;
        int parsed = json_parse(bad[i].text, strlen(bad[i].text), &v, &err);
        int good = !parsed && strstr(err.what, bad[i].what) && err.pos == bad[i].pos && v.type == JSON_NULL &&
                   v.count == 0 && v.items == NULL;
        if (!good) {
            printf("  '%s': parsed %d, error '%s' at %zu (want '%s' at %zu)\n", bad[i].text, parsed, err.what, err.pos,
                   bad[i].what, bad[i].pos);
        }
        ok &= good;
        if (parsed) { json_free(&v); }
    }
    check(ok, "json_malformed_refused", "a malformed document was accepted or misreported (above)");

    // a NUL byte: the length, not the terminator, bounds the document
    const char with_nul[] = "[1,\0 2]";
    JsonValue v;
    JsonError err;
    int parsed = json_parse(with_nul, sizeof(with_nul) - 1, &v, &err);
    check(!parsed && err.pos == 3, "json_nul_byte_refused", "parsed %d, error '%s' at %zu", parsed, err.what, err.pos);
    // a document cut short inside a nested value frees what it built (run under valgrind/ASan to see leaks)
    const char *cut = "{\"a\": [1, {\"b\": \"c\"}, [2, 3";
    parsed = json_parse(cut, strlen(cut), &v, &err);
    check(!parsed && strstr(err.what, "expected ',' or ']'") && err.pos == strlen(cut), "json_truncated_refused",
          "parsed %d, error '%s' at %zu", parsed, err.what, err.pos);
}

static void test_source_text(void) {
    const char *doc = "{\"n\": 2.0, \"s\": \"1e-5\", \"o\": {\n  \"x\": [1, 2]\n}, "
                      "\"long\": \"abcdefghijklmnopqrstuvwxyz\"}";
    JsonValue v;
    char n[16], str[16], obj[32], cut[8];
    int ok = parse(doc, &v);
    ok = ok && strcmp(json_source(json_get(&v, "n"), doc, n, sizeof(n)), "2.0") == 0 &&
         strcmp(json_source(json_get(&v, "s"), doc, str, sizeof(str)), "\"1e-5\"") == 0 &&
         strcmp(json_source(json_get(&v, "o"), doc, obj, sizeof(obj)), "{   \"x\": [1, 2] }") == 0 &&
         strcmp(json_source(json_get(&v, "long"), doc, cut, sizeof(cut)), "\"abc...") == 0;
    check(ok, "json_source_text_as_written", "'%s' '%s' '%s' '%s'", ok ? n : "", ok ? str : "", ok ? obj : "",
          ok ? cut : "");
    json_free(&v);
}

static void test_write_read_back(void) {
    const char *s = "quote \" backslash \\ newline \n tab \t bell \x07 caf\xc3\xa9 \xf0\x9f\x98\x80 /";
    JsonText t = {NULL, 0, 0};
    json_text_string(&t, s);
    JsonValue v;
    JsonError err;
    int ok = json_parse(t.s, t.len, &v, &err) && v.type == JSON_STRING && v.len == strlen(s) && strcmp(v.str, s) == 0;
    check(ok, "json_written_string_reads_back", "'%s' read back as '%s' (%s)", t.s, ok ? v.str : "", err.what);
    json_free(&v);
    json_text_free(&t);
    json_text_printf(&t, "{\"n\": %d, \"x\": %g}", 42, 1e-5);
    ok = json_parse(t.s, t.len, &v, &err) && json_get(&v, "n")->integer == 42 && json_get(&v, "x")->number == 1e-5;
    check(ok, "json_printf_reads_back", "'%s'", t.s);
    json_free(&v);
    json_text_free(&t);
}

int main(void) {
    test_scalars();
    test_strings();
    test_containers();
    test_malformed();
    test_source_text();
    test_write_read_back();
    return test_exit();
}
