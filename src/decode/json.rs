//! MySQL's binary JSON (`MYSQL_TYPE_JSON` cells) to JSON text.
//! MariaDB stores JSON as LONGTEXT and never sends this format.

use mysql_common::binlog::jsonb;
use mysql_common::io::ParseBuf;

pub fn binary_json_to_text(bytes: &[u8]) -> Result<String, String> {
    if bytes.is_empty() {
        // An empty payload is how MySQL logs a JSON null literal in some versions.
        return Ok("null".to_string());
    }
    let value: jsonb::Value<'_> = ParseBuf(bytes)
        .parse(())
        .map_err(|e| format!("bad binary JSON: {e}"))?;
    let dom = value.parse().map_err(|e| format!("bad binary JSON: {e}"))?;
    Ok(serde_json::Value::from(dom).to_string())
}
