//! The key pair of a `podCertificate` projection and the stub PKCS#10
//! request that proves its possession (upstream's `generateKeyAndProof`:
//! an empty subject, no attributes, signed by the new key), in DER built
//! here; the private key as PKCS#8 `PRIVATE KEY` PEM.
//!
//! Key types: `ECDSAP256`, `ECDSAP384` and `ED25519`. `RSA3072`,
//! `RSA4096` and `ECDSAP521` are refused: the crypto library rkube uses
//! (ring) cannot generate them.

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair};

/// A new key: its PKCS#8 PEM and the stub CSR's DER.
pub struct PodKey {
    /// `-----BEGIN PRIVATE KEY-----` PEM.
    pub pem: Vec<u8>,
    /// The stub PKCS#10 request, DER.
    pub csr: Vec<u8>,
}

// ---- DER ----

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .iter()
            .copied()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

fn bit_string(bytes: &[u8]) -> Vec<u8> {
    tlv(0x03, &[&[0u8][..], bytes].concat())
}

/// DER of an OBJECT IDENTIFIER given as its encoded body.
fn oid(body: &[u8]) -> Vec<u8> {
    tlv(0x06, body)
}

const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];

/// The CSR over `spki`, signed by `sign` with algorithm `alg` (DER).
fn csr(
    spki: &[u8],
    alg: &[u8],
    sign: impl Fn(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    let version = tlv(0x02, &[0]);
    let subject = seq(&[]);
    let attributes = tlv(0xa0, &[]);
    let info = seq(&[&version, &subject, spki, &attributes]);
    let sig = sign(&info)?;
    Ok(seq(&[&info, alg, &bit_string(&sig)]))
}

fn ecdsa(
    alg: &'static signature::EcdsaSigningAlgorithm,
    curve: &[u8],
    sig_oid: &[u8],
) -> Result<PodKey, String> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(|_| "generating the key failed")?;
    let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng)
        .map_err(|_| "reading the new key failed")?;
    let spki = seq(&[
        &seq(&[&oid(OID_EC_PUBLIC_KEY), &oid(curve)]),
        &bit_string(pair.public_key().as_ref()),
    ]);
    let alg_id = seq(&[&oid(sig_oid)]);
    let csr = csr(&spki, &alg_id, |m| {
        pair.sign(&rng, m)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| "signing the request failed".to_string())
    })?;
    Ok(PodKey {
        pem: super::pem::encode("PRIVATE KEY", pkcs8.as_ref()),
        csr,
    })
}

fn ed25519() -> Result<PodKey, String> {
    let mut seed = [0u8; 32];
    SystemRandom::new()
        .fill(&mut seed)
        .map_err(|_| "generating the key failed")?;
    let pair =
        Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| "generating the key failed")?;
    // PKCS#8 v1 (RFC 8410), as Go's MarshalPKCS8PrivateKey writes it.
    let pkcs8 = seq(&[
        &tlv(0x02, &[0]),
        &seq(&[&oid(OID_ED25519)]),
        &tlv(0x04, &tlv(0x04, &seed)),
    ]);
    let spki = seq(&[
        &seq(&[&oid(OID_ED25519)]),
        &bit_string(pair.public_key().as_ref()),
    ]);
    let alg_id = seq(&[&oid(OID_ED25519)]);
    let csr = csr(&spki, &alg_id, |m| Ok(pair.sign(m).as_ref().to_vec()))?;
    Ok(PodKey {
        pem: super::pem::encode("PRIVATE KEY", &pkcs8),
        csr,
    })
}

/// A new key of `key_type` and its proof.
pub fn generate(key_type: &str) -> Result<PodKey, String> {
    match key_type {
        "ECDSAP256" => ecdsa(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            OID_P256,
            OID_ECDSA_SHA256,
        ),
        "ECDSAP384" => ecdsa(
            &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
            OID_P384,
            OID_ECDSA_SHA384,
        ),
        "ED25519" => ed25519(),
        "RSA3072" | "RSA4096" | "ECDSAP521" => Err(format!(
            "keyType {key_type} is not supported by rkube (ECDSAP256, ECDSAP384 and ED25519 are)"
        )),
        other => Err(format!("unknown key type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CSR's parts: (info, algorithm, signature) as DER slices.
    fn split(der: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        fn read(d: &[u8]) -> (usize, usize) {
            // (header length, content length)
            if d[1] < 0x80 {
                (2, d[1] as usize)
            } else {
                let n = (d[1] & 0x7f) as usize;
                let len = d[2..2 + n]
                    .iter()
                    .fold(0usize, |a, b| (a << 8) | *b as usize);
                (2 + n, len)
            }
        }
        let (h, _) = read(der);
        let body = &der[h..];
        let (h1, l1) = read(body);
        let info = body[..h1 + l1].to_vec();
        let rest = &body[h1 + l1..];
        let (h2, l2) = read(rest);
        let alg = rest[..h2 + l2].to_vec();
        let sig = rest[h2 + l2..].to_vec();
        let (h3, _) = read(&sig);
        (info, alg, sig[h3 + 1..].to_vec())
    }

    #[test]
    fn every_supported_key_signs_its_request() {
        for (kind, verify) in [
            (
                "ECDSAP256",
                &signature::ECDSA_P256_SHA256_ASN1 as &dyn signature::VerificationAlgorithm,
            ),
            ("ECDSAP384", &signature::ECDSA_P384_SHA384_ASN1),
            ("ED25519", &signature::ED25519),
        ] {
            let k = generate(kind).unwrap();
            assert!(String::from_utf8(k.pem.clone())
                .unwrap()
                .starts_with("-----BEGIN PRIVATE KEY-----\n"));
            let (info, _alg, sig) = split(&k.csr);
            // The public key is the last BIT STRING of the SPKI inside the
            // info: find it by verifying with every 0x03 candidate.
            let verified = (0..info.len()).any(|i| {
                info[i] == 0x03
                    && info
                        .get(i + 1)
                        .is_some_and(|l| (*l as usize) < 0x80 && i + 2 + *l as usize <= info.len())
                    && {
                        let l = info[i + 1] as usize;
                        let key = &info[i + 3..i + 2 + l];
                        signature::UnparsedPublicKey::new(verify, key)
                            .verify(&info, &sig)
                            .is_ok()
                    }
            });
            assert!(verified, "{kind}: the request is signed by its key");
        }
    }

    #[test]
    fn unsupported_key_types_are_refused() {
        assert!(generate("RSA3072")
            .err()
            .unwrap()
            .contains("not supported by rkube"));
        assert!(generate("nope").err().unwrap().contains("unknown key type"));
    }

    #[test]
    fn der_lengths() {
        assert_eq!(tlv(0x04, &[1, 2]), vec![0x04, 2, 1, 2]);
        let long = tlv(0x04, &[0u8; 300]);
        assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2c]);
    }
}
