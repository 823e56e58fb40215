/* A stand-in for Windows 10's bcryptprimitives.dll, which Wine 8 (Debian
   12's) lacks and Go's runtime needs (ProcessPrng, its source of random
   bytes) before anything else runs: .ci/ensure-wine.sh builds it with
   MinGW and puts it in the Wine prefix's system32. Tests only. */
#include <windows.h>
#include <ntsecapi.h>

/* ProcessPrng fills buf with random bytes, as Windows 10's
   bcryptprimitives.dll does; Wine 8 has no such DLL. */
BOOL WINAPI ProcessPrng(PBYTE buf, SIZE_T n) {
    while (n > 0) {
        ULONG chunk = n > 0x40000000 ? 0x40000000 : (ULONG)n;
        if (!RtlGenRandom(buf, chunk)) return FALSE;
        buf += chunk;
        n -= chunk;
    }
    return TRUE;
}
