//! Forging DUMP payloads: the framing of a module value (type byte, module id, one STRING opcode
//! holding the module's blob, the module EOF opcode), sealed with a valid CRC64 so that the
//! payload reaches the module's `rdb_load`.

use super::{rdb_len, seal_dump, unseal_dump, Conn};

pub struct DumpFrame {
    /// The type byte and the module id (whose low 10 bits are the encoding version).
    pub header: Vec<u8>,
    pub rdb_version: u16,
}

impl DumpFrame {
    /// The framing of the value at `key` (created by the caller), as a real DUMP shows it.
    pub fn of_key(c: &mut Conn, key: &str) -> DumpFrame {
        let (body, rdb_version) = unseal_dump(&c.cmd(&["DUMP", key]).bytes());
        assert_eq!(body[0], 7, "RDB_TYPE_MODULE_2");
        assert_eq!(body[1], 0x81, "64-bit module id follows");
        assert_eq!(body[10], 5, "the value is one string");
        DumpFrame {
            header: body[..10].to_vec(),
            rdb_version,
        }
    }

    /// A payload holding `blob` as the module's data.
    pub fn with_blob(&self, blob: &[u8]) -> Vec<u8> {
        Self::framed(&self.header, blob, self.rdb_version)
    }

    /// A payload whose module id claims encoding version `encver`.
    pub fn with_encver(&self, encver: u16, blob: &[u8]) -> Vec<u8> {
        let mut header = self.header.clone();
        let mut id = [0u8; 8];
        id.copy_from_slice(&header[2..10]);
        let id = (u64::from_be_bytes(id) & !0x3ff) | u64::from(encver);
        header[2..10].copy_from_slice(&id.to_be_bytes());
        Self::framed(&header, blob, self.rdb_version)
    }

    fn framed(header: &[u8], blob: &[u8], rdb_version: u16) -> Vec<u8> {
        let mut body = header.to_vec();
        body.push(5); // RDB_MODULE_OPCODE_STRING
        body.extend(rdb_len(blob.len()));
        body.extend_from_slice(blob);
        body.push(0); // RDB_MODULE_OPCODE_EOF
        seal_dump(&body, rdb_version)
    }
}
