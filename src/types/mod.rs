//! What a MySQL/MariaDB column is, below both `schema` (which records the
//! shapes) and `decode` (which reads the rows): the type a column's text
//! names and its Arrow type in the lake ([`column`]), the charset its text
//! is in ([`charsets`]), INET4/INET6/UUID ([`address`]), what a TABLE_MAP's
//! optional metadata says of it, ENUM/SET labels among it ([`metadata`]),
//! and how its bytes are laid out in a rows event ([`codec`], the row plan
//! of one column). And where a change is: binlog positions and flavors
//! ([`binlog`]), GTID states ([`gtid`]). Nothing here knows of a table's
//! history or of events.

pub mod address;
pub mod binlog;
pub mod charsets;
pub mod codec;
pub mod column;
pub mod gtid;
pub mod metadata;

pub use charsets::Charset;
pub use column::ColumnKind;
