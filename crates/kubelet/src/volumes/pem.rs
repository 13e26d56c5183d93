//! PEM for the certificate projections, through the `pem` crate: the DER
//! of every block of a text (as Go's `pem.Decode` loop reads a bundle or a
//! chain), and one block written with `\n` line ends, 64 columns.

/// The DER of every block of `text`; nothing when the text does not parse
/// (the API server validates the bundles and chains it stores).
pub fn blocks(text: &str) -> Vec<Vec<u8>> {
    pem::parse_many(text)
        .unwrap_or_default()
        .into_iter()
        .map(pem::Pem::into_contents)
        .collect()
}

/// `der` as one `label` block.
pub fn encode(label: &str, der: &[u8]) -> Vec<u8> {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new(label, der), config).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_with_unix_lines() {
        let der: Vec<u8> = (0..=200u8).collect();
        let text = String::from_utf8(encode("CERTIFICATE", &der)).unwrap();
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----\n") && !text.contains('\r'));
        assert!(text.lines().all(|l| l.len() <= 64));
        let two = format!("junk\n{text}between\n{text}");
        assert_eq!(blocks(&two), vec![der.clone(), der]);
        assert!(blocks("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n").is_empty());
    }
}
