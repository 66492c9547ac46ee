use super::*;
use crate::decode::testing::jsonb::*;

fn text(v: &V) -> String {
    binary_json_to_text(&v.doc()).unwrap()
}

/// DATETIME packed as `TIME_to_longlong_datetime_packed` does.
fn datetime_packed(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> i64 {
    let ymd = ((y * 13 + mo) << 5) | d;
    let hms = (h << 12) | (mi << 6) | s;
    (((ymd << 17) | hms) << 24) + us
}

fn time_packed(negative: bool, h: i64, mi: i64, s: i64, us: i64) -> i64 {
    let v = (((h << 12) | (mi << 6) | s) << 24) + us;
    if negative {
        -v
    } else {
        v
    }
}

#[test]
fn literals_and_integers_print_as_mysql_does() {
    assert_eq!(text(&null()), "null");
    assert_eq!(text(&bool(true)), "true");
    assert_eq!(text(&bool(false)), "false");
    assert_eq!(text(&i16(-32768)), "-32768");
    assert_eq!(text(&u16(65535)), "65535");
    assert_eq!(text(&i32(-2_147_483_648)), "-2147483648");
    assert_eq!(text(&u32(4_294_967_295)), "4294967295");
    assert_eq!(text(&i64(i64::MIN)), "-9223372036854775808");
    // A large uint64 stays positive.
    assert_eq!(text(&u64(u64::MAX)), "18446744073709551615");
    assert_eq!(binary_json_to_text(&[]).unwrap(), "null");
}

#[test]
fn doubles_keep_their_value_in_mysql_notation() {
    for (x, want) in [
        (1.0, "1.0"),
        (-2.5, "-2.5"),
        (0.1, "0.1"),
        (std::f64::consts::PI, "3.141592653589793"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1e-7, "0.0000001"),
        (1e-15, "0.000000000000001"),
        (1.5e-16, "1.5e-16"),
        (1e14, "100000000000000.0"),
        (123456789012345.0, "123456789012345.0"),
        (1e15, "1e15"),
        (1234567890123456.8, "1234567890123456.8"),
        (1e300, "1e300"),
        (-1.7976931348623157e308, "-1.7976931348623157e308"),
        (5e-324, "5e-324"),
        (0.1 + 0.2, "0.30000000000000004"),
    ] {
        assert_eq!(text(&f64(x)), want, "{x:e}");
        // The printed text reads back as the same double.
        assert_eq!(
            want.parse::<f64>().unwrap().to_bits(),
            x.to_bits(),
            "{want}"
        );
    }
}

#[test]
fn strings_are_escaped_as_mysql_double_quote_does() {
    assert_eq!(
        text(&string("a\"b\\c/d\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}")),
        r#""a\"b\\c/d\b\f\n\r\t\u0001\u001f"#.to_string() + "\u{7f}\""
    );
    assert_eq!(text(&string("€ 日本 😀")), "\"€ 日本 😀\"");
    assert_eq!(text(&string("")), "\"\"");
    // A string longer than 127 bytes has a two-byte length.
    let long = "x".repeat(300);
    assert_eq!(text(&string(&long)), format!("\"{long}\""));
    let bad = V {
        ty: STRING,
        body: vec![2, 0xC3, 0x28],
    };
    assert!(binary_json_to_text(&bad.doc())
        .unwrap_err()
        .contains("UTF-8"));
}

#[test]
fn small_and_large_containers_nest() {
    let inner = array(&[i16(1), string("two"), null()]);
    let doc = object(&[
        ("b", bool(false)),
        ("aa", inner.clone()),
        (
            "key with space",
            large_object(&[("x", i32(7)), ("yy", u32(8))]),
        ),
    ]);
    assert_eq!(
        text(&doc),
        r#"{"b": false, "aa": [1, "two", null], "key with space": {"x": 7, "yy": 8}}"#
    );
    assert_eq!(
        text(&large_array(&[i32(-5), u32(6), i16(3), inner, object(&[])])),
        r#"[-5, 6, 3, [1, "two", null], {}]"#
    );
    assert_eq!(text(&array(&[])), "[]");
    // Keys print in the stored (MySQL) order, not alphabetically.
    assert_eq!(
        text(&object(&[("z", i16(1)), ("ab", i16(2))])),
        r#"{"z": 1, "ab": 2}"#
    );
}

#[test]
fn nesting_deeper_than_mysql_allows_is_refused() {
    let mut v = null();
    for _ in 0..100 {
        v = array(&[v]);
    }
    assert!(text(&v).starts_with("[[[["));
    let too_deep = array(&[v]);
    assert!(binary_json_to_text(&too_deep.doc())
        .unwrap_err()
        .contains("deeper"));
}

#[test]
fn decimals_print_as_numbers_with_their_exact_digits() {
    // DECIMAL(5,2) 123.45: intg 3 digits (2 bytes), scale 2 (1 byte); sign bit set when positive.
    let pos = opaque(246, &[5, 2, 0x80, 0x7B, 45]);
    assert_eq!(text(&pos), "123.45");
    let neg = opaque(246, &[5, 2, !0x80, !0x7B, !45]);
    assert_eq!(text(&neg), "-123.45");
    // 0.50 as DECIMAL(2,2): no integer digits, trailing zero kept.
    assert_eq!(text(&opaque(246, &[2, 2, 0x80 | 50])), "0.50");
    // DECIMAL(20,0) 12345678901234567890: 2 lead digits (1 byte) + two 9-digit groups.
    let mut big = vec![20, 0, 0x80 | 12];
    big.extend(345_678_901u32.to_be_bytes());
    big.extend(234_567_890u32.to_be_bytes());
    assert_eq!(text(&opaque(246, &big)), "12345678901234567890");
    // DECIMAL(12,10) 1.0000000005 inside an array: 2 integer digits (1 byte),
    // then a 9-digit fraction group (4 bytes) and 1 more digit (1 byte).
    let mut frac = vec![12, 10, 0x80 | 1];
    frac.extend(0u32.to_be_bytes());
    frac.push(5);
    assert_eq!(text(&array(&[opaque(246, &frac)])), "[1.0000000005]");
    assert!(binary_json_to_text(&opaque(246, &[5, 2, 0x80]).doc())
        .unwrap_err()
        .contains("shorter"));
}

#[test]
fn temporal_values_print_as_json_extract_does() {
    let dt = datetime_packed(2024, 2, 29, 13, 5, 9, 120_000);
    assert_eq!(
        text(&opaque(12, &dt.to_le_bytes())),
        "\"2024-02-29 13:05:09.120000\""
    );
    let ts = datetime_packed(1970, 1, 1, 0, 0, 1, 0);
    assert_eq!(
        text(&opaque(7, &ts.to_le_bytes())),
        "\"1970-01-01 00:00:01.000000\""
    );
    let date = datetime_packed(999, 12, 31, 0, 0, 0, 0);
    assert_eq!(text(&opaque(10, &date.to_le_bytes())), "\"0999-12-31\"");
    let time = time_packed(false, 12, 34, 56, 789);
    assert_eq!(
        text(&opaque(11, &time.to_le_bytes())),
        "\"12:34:56.000789\""
    );
    let neg = time_packed(true, 838, 59, 59, 0);
    assert_eq!(
        text(&opaque(11, &neg.to_le_bytes())),
        "\"-838:59:59.000000\""
    );
    let neg_frac = time_packed(true, 0, 0, 1, 500_000);
    assert_eq!(
        text(&object(&[("t", opaque(11, &neg_frac.to_le_bytes()))])),
        r#"{"t": "-00:00:01.500000"}"#
    );
    assert!(binary_json_to_text(&opaque(12, &[1, 2, 3]).doc()).is_err());
}

#[test]
fn other_opaque_values_print_as_mysql_base64() {
    // BLOB (252) "hi" → aGk=
    assert_eq!(text(&opaque(252, b"hi")), "\"base64:type252:aGk=\"");
    assert_eq!(text(&opaque(16, &[0x01])), "\"base64:type16:AQ==\"");
    assert_eq!(text(&opaque(15, b"")), "\"base64:type15:\"");
    // 60 bytes make 80 characters: a line break after 76.
    let data: Vec<u8> = (0u8..60).collect();
    let got = text(&opaque(252, &data));
    let (first, second) = got
        .trim_matches('"')
        .trim_start_matches("base64:type252:")
        .split_once("\\n")
        .unwrap();
    assert_eq!(first.len(), 76);
    assert_eq!(second.len(), 4);
    assert!(first.starts_with("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g"));
    // A string MySQL kept as opaque VAR_STRING prints as a string.
    assert_eq!(text(&opaque(253, "d\"é".as_bytes())), "\"d\\\"é\"");
}

#[test]
fn diff_paths_parse_like_mysql_writes_them() {
    assert_eq!(parse_path("$").unwrap(), vec![]);
    assert_eq!(
        parse_path("$.a.b[3]").unwrap(),
        vec![
            Leg::Member("a".into()),
            Leg::Member("b".into()),
            Leg::Cell {
                index: 3,
                from_end: false
            }
        ]
    );
    assert_eq!(
        parse_path(r#"$."key with space"."q\"x"[0][last][last-2]"#).unwrap(),
        vec![
            Leg::Member("key with space".into()),
            Leg::Member("q\"x".into()),
            Leg::Cell {
                index: 0,
                from_end: false
            },
            Leg::Cell {
                index: 0,
                from_end: true
            },
            Leg::Cell {
                index: 2,
                from_end: true
            },
        ]
    );
    assert!(parse_path("$.*").is_err());
    assert!(parse_path("$[*]").is_err());
    assert!(parse_path("$[1 to 3]").is_err());
    assert!(parse_path("a.b").is_err());
}

fn patched(before: &V, diffs: &[(u8, &str, Option<V>)]) -> Result<String, String> {
    let mut bytes = Vec::new();
    for (op, path, value) in diffs {
        diff(*op, path, value.as_ref(), &mut bytes);
    }
    let mut out = String::new();
    apply_json_diffs(&before.doc(), &bytes, &mut out)?;
    Ok(out)
}

#[test]
fn diffs_replace_insert_and_remove() {
    let before = object(&[
        (
            "a",
            object(&[("b", array(&[i16(0), i16(1), i16(2), i16(3)]))]),
        ),
        ("k", string("v")),
        ("list", array(&[string("x")])),
    ]);
    assert_eq!(
        text(&before),
        r#"{"a": {"b": [0, 1, 2, 3]}, "k": "v", "list": ["x"]}"#
    );
    let got = patched(
        &before,
        &[
            (REPLACE, "$.a.b[3]", Some(f64(2.5))),
            (INSERT, "$.zz", Some(bool(true))),
            (INSERT, "$.c", Some(null())),
            (INSERT, "$.list[0]", Some(i16(-1))),
            (INSERT, "$.list[9]", Some(string("end"))),
            (REMOVE, "$.k", None),
            (REMOVE, "$.a.b[last]", None),
            (INSERT, r#"$."key with space""#, Some(array(&[]))),
        ],
    )
    .unwrap();
    // New keys take their place in MySQL's key order.
    assert_eq!(
        got,
        r#"{"a": {"b": [0, 1, 2]}, "c": null, "zz": true, "list": [-1, "x", "end"], "key with space": []}"#
    );
}

#[test]
fn diffs_mysql_would_reject_are_errors() {
    let before = object(&[("a", array(&[i16(1)]))]);
    for (op, path, value) in [
        (REPLACE, "$.missing", Some(null())),
        (REPLACE, "$.a[1]", Some(null())),
        (INSERT, "$.a", Some(null())),
        (INSERT, "$.x.y", Some(null())),
        (REMOVE, "$.a[5]", None),
        (REMOVE, "$.a.b", None),
    ] {
        let err = patched(&before, &[(op, path, value)]).unwrap_err();
        assert!(err.contains(path), "{err}");
    }
    let err = patched(&before, &[(7, "$.a", None)]).unwrap_err();
    assert!(err.contains("unknown operation 7"), "{err}");
    let mut truncated = Vec::new();
    diff(REPLACE, "$.a", Some(&i16(5)), &mut truncated);
    truncated.pop();
    assert!(apply_json_diffs(&before.doc(), &truncated, &mut String::new()).is_err());
}

#[test]
fn a_replaced_root_value_prints_like_a_full_image() {
    let before = object(&[("n", i32(1))]);
    let after = object(&[("n", i32(2))]);
    let got = patched(&before, &[(REPLACE, "$.n", Some(i32(2)))]).unwrap();
    assert_eq!(got, text(&after));
    // No diffs: the before image unchanged.
    assert_eq!(patched(&before, &[]).unwrap(), text(&before));
}
