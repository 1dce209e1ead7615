//! A minimal RESP2/RESP3 client for tests: exact error texts, raw bytes, no extra dependency.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Bulk(Vec<u8>),
    Simple(String),
    Error(String),
    Nil,
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Double(String),
    Bool(bool),
}

impl Value {
    pub fn int(&self) -> i64 {
        match self {
            Value::Int(v) => *v,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Value::Bulk(b) => b.clone(),
            Value::Simple(s) => s.clone().into_bytes(),
            other => panic!("expected a string, got {other:?}"),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    pub fn error(&self) -> String {
        match self {
            Value::Error(e) => e.clone(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    /// Every string and number inside, space-separated: for "contains" checks on nested replies.
    pub fn flat_text(&self) -> String {
        match self {
            Value::Int(v) => v.to_string(),
            Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Value::Simple(s) | Value::Error(s) | Value::Double(s) => s.clone(),
            Value::Nil => "(nil)".into(),
            Value::Bool(b) => b.to_string(),
            Value::Array(items) => items
                .iter()
                .map(Value::flat_text)
                .collect::<Vec<_>>()
                .join(" "),
            Value::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| format!("{} {}", k.flat_text(), v.flat_text()))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Value::Error(_))
    }

    pub fn array(&self) -> Vec<Value> {
        match self {
            Value::Array(items) => items.clone(),
            other => panic!("expected an array, got {other:?}"),
        }
    }

    /// Field lookup in a RESP3 map or a flat RESP2 `field value ...` array.
    pub fn field(&self, name: &str) -> Value {
        let pairs: Vec<(Value, Value)> = match self {
            Value::Map(pairs) => pairs.clone(),
            Value::Array(items) => items
                .chunks(2)
                .map(|c| (c[0].clone(), c[1].clone()))
                .collect(),
            other => panic!("expected a map, got {other:?}"),
        };
        pairs
            .into_iter()
            .find(|(k, _)| k.bytes() == name.as_bytes())
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no field {name} in {self:?}"))
    }
}

pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    pub fn connect(port: u16) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            let a = a.as_ref();
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&buf).expect("write to server");
    }

    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Value {
        self.send(args);
        self.read().expect("read reply")
    }

    /// Shorthand for commands written as one string of space-separated words.
    pub fn q(&mut self, line: &str) -> Value {
        let args: Vec<&str> = line.split_whitespace().collect();
        self.cmd(&args)
    }

    pub fn read(&mut self) -> std::io::Result<Value> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(1);
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, line.clone());
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
        Ok(match kind {
            "+" => Value::Simple(rest.to_string()),
            "-" => Value::Error(rest.to_string()),
            ":" => Value::Int(num(rest)?),
            "," => Value::Double(rest.to_string()),
            "#" => Value::Bool(rest == "t"),
            "_" => Value::Nil,
            "$" | "=" | "(" => {
                let len = num(rest)?;
                if len < 0 {
                    return Ok(Value::Nil);
                }
                let mut buf = vec![0u8; len as usize + 2];
                self.reader.read_exact(&mut buf)?;
                buf.truncate(len as usize);
                Value::Bulk(buf)
            }
            "*" | "~" | ">" => {
                let len = num(rest)?;
                if len < 0 {
                    return Ok(Value::Nil);
                }
                Value::Array((0..len).map(|_| self.read()).collect::<Result<_, _>>()?)
            }
            "%" => {
                let len = num(rest)?;
                let mut pairs = Vec::new();
                for _ in 0..len {
                    pairs.push((self.read()?, self.read()?));
                }
                Value::Map(pairs)
            }
            _ => return Err(bad()),
        })
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }
}
