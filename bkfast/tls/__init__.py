"""TLS for bookies and clients with BookKeeper's keys (spec §8): OpenSSL contexts built from PEM/PKCS12
key and trust stores (`context`), the certificate-role authorization of Java's BookieAuthZFactory
(`authz`), and throwaway certificate authorities for sandboxes and tests (`certs`)."""
