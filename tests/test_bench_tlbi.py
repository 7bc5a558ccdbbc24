# SPDX-License-Identifier: GPL-2.0
"""make bench-tlbi: the QEMU plugin's decoding of TLBI instructions, and
the runner's reading of its counts."""

import subprocess
import textwrap

import pytest

from asyncfork import bench_tlbi
from asyncfork.paths import TOP

PLUGIN_DIR = TOP / "bench/qemu"

# Encodings as GNU as (-march=armv8.4-a) assembles them.
WORDS = {
    0xd5088320: "VAE1IS",      # tlbi vae1is, x0
    0xd50883a1: "VALE1IS",     # tlbi vale1is, x1
    0xd5088342: "ASIDE1IS",    # tlbi aside1is, x2
    0xd508831f: "VMALLE1IS",   # tlbi vmalle1is
    0xd5088223: "RVAE1IS",     # tlbi rvae1is, x3
    0xd50887a4: "VALE1",       # tlbi vale1, x4
    0xd5088725: "VAE1",        # tlbi vae1, x5
    0xd50882a6: "RVALE1IS",    # tlbi rvale1is, x6
    0xd50883e7: "VAALE1IS",    # tlbi vaale1is, x7
    0xd50b7e20: None,          # dc civac, x0: CRn 7, no TLBI
    0xd50b7520: None,          # ic ivau, x0
    0xd5032f9f: None,          # hint #124, the start marker
    0xd503201f: None,          # nop
}


def test_plugin_decodes_tlbi(tmp_path):
    words = ", ".join(f"0x{w:08x}u" for w in WORDS)
    src = tmp_path / "decode.c"
    src.write_text(textwrap.dedent(f"""\
        #include "tlbi-count.c"

        /* QEMU's side of the API, which this program never calls. */
        size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb) {{ return 0; }}
        struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb,
                                                         size_t idx) {{ return NULL; }}
        size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn) {{ return 0; }}
        const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn) {{ return NULL; }}
        void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
            qemu_plugin_vcpu_udata_cb_t cb, enum qemu_plugin_cb_flags flags,
            void *userdata) {{ }}
        void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
            qemu_plugin_vcpu_tb_trans_cb_t cb) {{ }}

        int main(void)
        {{
            static const uint32_t words[] = {{ {words} }};
            char name[32];

            for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {{
                if (!is_tlbi(words[i])) {{
                    printf("-\\n");
                    continue;
                }}
                name_of(key_of(words[i]), name, sizeof(name));
                printf("%s\\n", name);
            }}
            return 0;
        }}
        """))
    exe = tmp_path / "decode"
    subprocess.run(["cc", "-O1", "-I", str(PLUGIN_DIR), "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out.split() == [n or "-" for n in WORDS.values()]


def test_plugin_builds_as_a_qemu_plugin(tmp_path):
    subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), f"OUT={tmp_path}"], check=True)
    syms = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "tlbi-count.so")],
                          check=True, capture_output=True, text=True).stdout
    assert "qemu_plugin_install" in syms and "qemu_plugin_version" in syms


def test_forkbench_marks_around_each_fork():
    src = (TOP / "bench/forkbench.c").read_text()
    assert 'hint #124' in src and 'hint #125' in src
    # The markers are the plugin's.
    plugin = (PLUGIN_DIR / "tlbi-count.c").read_text()
    assert "0xd5032f9fu\t/* HINT #124 */" in plugin and "0xd5032fbfu\t/* HINT #125 */" in plugin


def test_summary_per_cpu_and_mode():
    text = "\n".join([
        "interval 1: VALE1IS=130 ASIDE1IS=2",
        "interval 2: VALE1IS=128 ASIDE1IS=2",
        "interval 3: VAE1IS=128 VALE1IS=129 ASIDE1IS=2",
        "interval 4: VAE1IS=128 VALE1IS=128 ASIDE1IS=3",
        "noise the plugin never writes",
    ])
    intervals = bench_tlbi.parse_intervals(text)
    assert len(intervals) == 4
    s = bench_tlbi.summarize(intervals, ["max"], repeat=2, tables=128)
    assert s["max"]["default"] == {"ASIDE1IS": 2, "VALE1IS": 129}
    assert s["max"]["async"] == {"ASIDE1IS": 2.5, "VAE1IS": 128, "VALE1IS": 128.5}
    assert s["max"]["extra_per_table"]["VAE1IS"] == 1
    table = bench_tlbi.table(s, 256, 128)
    assert "| max | VAE1IS | 0 | 128 | +1 |" in table
    with pytest.raises(ValueError):
        bench_tlbi.summarize(intervals[:3], ["max"], repeat=2, tables=128)
