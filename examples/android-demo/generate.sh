#!/usr/bin/env bash
# Regenerates the JVM (Android-style Java) test fixtures in this directory from src/:
#
#   mapping.txt              ProGuard's mapping file of the obfuscated, optimized build
#   obfuscated-trace.txt     what the obfuscated build printed when it crashed (stderr)
#   expected-trace.txt       what the same program printed unobfuscated: the ground truth
#   retrace-proguard.txt     ProGuard's own retrace of obfuscated-trace.txt (the peer's answer)
#   obfuscated-logcat.txt    obfuscated-trace.txt as Android's logcat shows a crash
#   obfuscated-sentry.json   obfuscated-trace.txt as a Sentry event (exception.values[])
#
# Both runs are real: the same classes, once as javac wrote them and once after ProGuard; the
# crash (an IllegalStateException thrown three calls deep, which ProGuard inlines into one
# method, wrapped in a CheckoutFailedException) is the program's own.
#
# Needs a JDK (javac, jar, java: the committed files were made with Debian's OpenJDK 17.0.15)
# and ProGuard (Debian proguard-cli 6.2.2; its retrace.jar from libproguard-java), python3.
# Debian: apt-get install default-jdk-headless proguard-cli python3.
#
# ProGuard 6.2.2 reads class files up to Java 13, so the program is compiled for Java 8
# (`--release 8`) and ProGuard's library classes (the Java API it checks calls against) are
# the JDK's own signatures of Java 8, from its lib/ct.sym, with their class-file version set
# to 52 (Java 8): ct.sym stores them as version 61 files. Objects go to build/ (not committed).
#
# Usage: bash examples/android-demo/generate.sh   (from any directory; safe to re-run)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
cd "$HERE"

TOOLS_PACKAGES="default-jdk-headless proguard-cli python3"
source "$HERE/../common/tools.sh"

JAVAC="$(find_tool javac)"
JAVA="$(find_tool java)"
JAR="$(find_tool jar)"
PROGUARD="$(find_tool proguard)"
PYTHON="$(find_tool python3)"
RETRACE_JAR=/usr/share/java/retrace.jar
[[ -f "$RETRACE_JAR" ]] || die "$RETRACE_JAR is missing (Debian: apt-get install libproguard-java)"
JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$JAVAC")")")"
[[ -f "$JAVA_HOME/lib/ct.sym" ]] || die "$JAVA_HOME/lib/ct.sym is missing"

echo "== tools"
"$JAVAC" -version
"$PROGUARD" 2>&1 | head -n 1 || true

export LC_ALL=C
rm -rf build mapping.txt obfuscated-trace.txt expected-trace.txt retrace-proguard.txt \
    obfuscated-logcat.txt obfuscated-sentry.json
mkdir -p build/classes build/ct

echo "== compile"
"$JAVAC" --release 8 -g:source,lines -d build/classes $(find src -name '*.java' | sort)
(cd build/classes && "$JAR" cf ../shop.jar .)

echo "== library classes (Java 8 signatures from ct.sym)"
"$PYTHON" "$HERE/java8_library.py" "$JAVA_HOME/lib/ct.sym" build/ct/classes
(cd build/ct/classes && "$JAR" cf ../java8.jar .)

echo "== obfuscate"
"$PROGUARD" @proguard.pro \
    -injars build/shop.jar -outjars build/shop-obfuscated.jar \
    -libraryjars build/ct/java8.jar -printmapping mapping.txt >build/proguard.log

# Both runs crash (exit 1) on purpose.
echo "== run"
"$JAVA" -cp build/shop.jar com.example.shop.ShopApp 2>expected-trace.txt >/dev/null && die "the program did not crash"
"$JAVA" -cp build/shop-obfuscated.jar com.example.shop.ShopApp 2>obfuscated-trace.txt >/dev/null && die "the obfuscated program did not crash"
"$JAVA" -jar "$RETRACE_JAR" mapping.txt obfuscated-trace.txt >retrace-proguard.txt

echo "== other shapes"
"$PYTHON" "$HERE/make_shapes.py" obfuscated-trace.txt obfuscated-logcat.txt obfuscated-sentry.json

# The peer must agree with the ground truth (but for `... N more`, which Java prints for the
# frames a cause shares with its enclosing trace and a retrace of another trace does not).
grep -v '^\s*\.\.\. [0-9]* more$' expected-trace.txt | grep -v 'ShopApp.main' >build/expected.cmp
grep -v 'ShopApp.main' retrace-proguard.txt >build/retrace.cmp
diff -u build/expected.cmp build/retrace.cmp || die "ProGuard's retrace disagrees with the unobfuscated run"
echo "== done: $(wc -l <mapping.txt) mapping lines, $(grep -c '	at ' obfuscated-trace.txt) obfuscated frames"
