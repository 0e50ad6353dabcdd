"""BookieAuthZFactory's verdict on a client certificate's roles, as a Java 4.16.7 bookie gives it (spec §8.2):
a table of OU forms with `authorizedRoles=bars` (certificates made here by a real CA), then a real bookie
process that admits and refuses over TLS exactly the forms where bkfast's earlier parsing and Java's
differed."""

from __future__ import annotations

import pytest

from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.tls.authz import RoleAuthorizer, roles_of
from bkfast.tls.certs import CertificateAuthority
from tests.server_support import BookieProcess
from tests.tls_support import AUTHZ_FACTORY, make_pki, start_tls

# (OU RDNs of the subject, in encoded order; the roles Java reads; admitted with authorizedRoles=bars)
FORMS = [
    (("0:bars",), ["bars"], True),
    (("0:bars;1:cl1",), ["bars"], True),
    (("1:cl1;0:bars",), ["bars"], True),
    (("1:cl1", "0:bars"), [], False),                  # two OU RDNs: only the first counts
    (("0:bars", "1:cl1"), ["bars"], True),
    (("1:cl1; 0:bars",), [], False),                   # " 0:bars" is not a code:value part
    ((" 0:bars",), [], False),
    (("0 :bars",), [], False),
    (("0: bars ;1:cl1",), ["bars"], True),             # a value is trimmed
    (("0:bars , other",), ["bars", "other"], True),
    (("0:,bars",), ["", "bars"], False),               # empty roles are kept: the first is ""
    (("0:other;0:bars",), ["bars"], True),             # the last part with a code wins
    (("0:bars;0:other",), ["other"], False),
    (("0:Bars",), ["Bars"], False),                    # case counts
    (("1:cl1",), [], False),                           # no 0 part
    (("0:other,bars",), ["other", "bars"], False),     # only the first role is compared
    (("0:bars,other",), ["bars", "other"], True),
    (("0:",), [""], False),
    (("0:bars,",), ["bars"], True),                    # Java's split drops trailing empty pieces
    (("0:bars:x",), ["bars:x"], False),
    ((), [], False),                                   # no OU at all
]

# The forms a bkfast bookie and a Java bookie decided differently before (issue 30).
DIFFERED = [("1:cl1", "0:bars"), ("1:cl1; 0:bars",), ("0:,bars",), ("0:other;0:bars",)]


@pytest.fixture(scope="module")
def ca():
    return CertificateAuthority("roles test CA")


@pytest.mark.parametrize("units, roles, admitted", FORMS, ids=[" + ".join(f[0]) or "no OU" for f in FORMS])
def test_roles_and_verdict_as_java(ca, units, roles, admitted):
    cert = ca.issue("client", ou=units or None).cert
    assert roles_of(cert) == roles
    verdict = RoleAuthorizer(["bars"]).check(cert)
    assert (verdict is None) == admitted, verdict


@pytest.fixture(scope="module")
def bars_bookie(tmp_path_factory):
    d = tmp_path_factory.mktemp("roles")
    pki = make_pki(d / "pki")
    certs = {units: pki.authority.issue(f"client-{n}", ou=units).write_pem(d, f"client-{n}")
             for n, units in enumerate(DIFFERED)}
    b = BookieProcess(d / "bookie")
    b.extra_conf.update(pki.bookie_conf(authz=True))
    b.extra_conf.update(bookieAuthProviderFactoryClass=AUTHZ_FACTORY, authorizedRoles="bars")
    b.start()
    yield b, pki, certs
    assert b.stop() == 0, b.log()


def _read_status(bookie, pki, cert_files) -> int:
    """A v3 read of a ledger that does not exist, over TLS with the certificate: ENOLEDGER/ENOENTRY when the
    connection is authorized, EUA when not."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(pki.ca))
    key, cert = cert_files
    ctx.load_cert_chain(str(cert), str(key))
    request = pb.Request(header=pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.READ_ENTRY, txnId=7),
                         readRequest=pb.ReadRequest(ledgerId=987654, entryId=0))
    with start_tls(bookie.connect(), ctx) as c:
        c.send_body(request.SerializeToString())
        while True:
            answer = pb.Response.FromString(c.recv_body())
            if answer.header.operation == pb.READ_ENTRY:
                return answer.status


@pytest.mark.parametrize("units", DIFFERED, ids=[" + ".join(u) for u in DIFFERED])
def test_a_bookie_decides_the_forms_that_differed_as_java(bars_bookie, units):
    bookie, pki, certs = bars_bookie
    admitted = dict((f[0], f[2]) for f in FORMS)[units]
    status = _read_status(bookie, pki, certs[units])
    if admitted:
        assert status in (pb.ENOLEDGER, pb.ENOENTRY), status
    else:
        assert status == pb.EUA, status
