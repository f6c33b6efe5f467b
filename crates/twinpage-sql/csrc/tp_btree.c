/*
** twinpage-sql: SQLite's B-tree interface (btree.h) over twinpage.
**
** The build script cuts the pager.c, wal.c, btmutex.c, btree.c and
** backup.c sections out of SQLite's amalgamation and includes this file in
** their place, so it is compiled inside the amalgamation and sees its
** internal types (KeyInfo, UnpackedRecord, Mem). Storage, transactions and
** cursors live in Rust (src/shim.rs); this file translates each btree.h
** call into calls of the twinpage_bt_* functions, and hands Rust the
** comparator it needs for index records (SQLite's own record compare).
**
** Functions that reach SQLite's pager (the Pager object and its calls from
** the pragma code and the VDBE) are answered here from twinpage's state,
** or refused with an SQLite error code; backup and VACUUM's file copy are
** refused with SQLITE_ERROR (see docs/SQL.md).
*/

/************************* the Rust side *************************/
typedef struct TpConn TpConn;
typedef struct TpCur TpCur;

/* Comparators Rust calls back through pointers (never by name, so the
** prefixed and unprefixed builds of this file never meet). */
typedef int (*tp_compare_fn)(void *pCtx, const void *a, int na, const void *b, int nb);
typedef int (*tp_probe_fn)(void *pCtx, const void *a, int na);
typedef void *(*tp_order_from_spec_fn)(const unsigned char *spec, int nSpec);
typedef void (*tp_order_free_fn)(void *pCtx);

typedef struct TpCallbacks {
  tp_compare_fn xCompare;
  tp_order_from_spec_fn xOrderFromSpec;
  tp_order_free_fn xOrderFree;
} TpCallbacks;

/* What a cursor move leaves for C to read. */
typedef struct TpRow {
  int valid;                 /* points at an entry */
  sqlite3_int64 nKey;        /* rowid (intkey tables) */
  const unsigned char *pData;/* payload: record (table) or key (index) */
  unsigned int nData;
} TpRow;

extern TpConn *twinpage_bt_open(const char *zPath, int isTemp, const char *zMode,
    const char *zConcurrency, const char *zSync, int pageSize, int readOnly,
    const TpCallbacks *pCb, int *pRc);
extern int twinpage_bt_close(TpConn*);
extern const char *twinpage_bt_errmsg(TpConn*);
extern int twinpage_bt_begin(TpConn*, int wrflag, int inExplicitTxn, int busyMs);
extern int twinpage_bt_commit(TpConn*);
extern int twinpage_bt_rollback(TpConn*, int writeOnly);
extern int twinpage_bt_txn_state(TpConn*);
extern int twinpage_bt_savepoints_open(TpConn*, int n);
extern int twinpage_bt_savepoint(TpConn*, int op, int iSavepoint);
extern int twinpage_bt_get_meta(TpConn*, int idx, unsigned int *pValue);
extern int twinpage_bt_update_meta(TpConn*, int idx, unsigned int value);
extern int twinpage_bt_create_table(TpConn*, int intKey, const unsigned char *spec, int nSpec,
    unsigned int *piTable);
extern int twinpage_bt_drop_table(TpConn*, unsigned int iTable);
extern int twinpage_bt_clear_table(TpConn*, unsigned int iTable, sqlite3_int64 *pnChange);
extern int twinpage_bt_page_size(TpConn*);
extern unsigned int twinpage_bt_page_count(TpConn*);
extern int twinpage_bt_read_only(TpConn*);
extern int twinpage_bt_is_temp(TpConn*);
extern const char *twinpage_bt_filename(TpConn*);
extern int twinpage_bt_mode_count(void);
extern const char *twinpage_bt_mode_name(int i);
extern int twinpage_bt_mode(TpConn*);
extern int twinpage_bt_set_mode(TpConn*, int i);
extern int twinpage_bt_set_sync(TpConn*, int level);
extern int twinpage_bt_checkpoint(TpConn*, int eMode, int *pnLog, int *pnCkpt);
extern int twinpage_bt_integrity(TpConn*, const unsigned int *aRoot, sqlite3_int64 *aCnt,
    int nRoot, char **pzErr, int *pnErr);
extern void twinpage_bt_free_string(char*);
extern unsigned int twinpage_bt_data_version(TpConn*);

extern TpCur *twinpage_bt_cursor(TpConn*, unsigned int iTable, int intKey, int write,
    void *pOrder, int *pRc);
extern void twinpage_bt_cursor_close(TpCur*);
extern int twinpage_bt_first(TpCur*, int last, TpRow*);
extern int twinpage_bt_step(TpCur*, int forward, TpRow*);
extern int twinpage_bt_seek_int(TpCur*, sqlite3_int64 iKey, int *pRes, TpRow*);
extern int twinpage_bt_seek_probe(TpCur*, tp_probe_fn xProbe, void *pCtx, int *pRes, TpRow*);
extern int twinpage_bt_sync(TpCur*, TpRow*, int *pMoved, int *pDifferent);
extern int twinpage_bt_insert(TpCur*, sqlite3_int64 iKey, const void *pKey, int nKey,
    const void *pData, int nData, int nZero, int savePosition, TpRow*);
extern int twinpage_bt_delete(TpCur*, TpRow*);
extern int twinpage_bt_count(TpCur*, sqlite3_int64 *pn);

/************************* structures *************************/

/* Cursor states (as btreeInt.h numbers them). */
#define TP_CURSOR_VALID    0
#define TP_CURSOR_INVALID  1
#define TP_CURSOR_FAULT    4

struct Pager {
  Btree *pBtree;
  int eMode;                 /* journal mode number (see sqlite3JournalModename) */
};

struct BtShared {
  int unused;
};

struct Btree {
  sqlite3 *db;
  TpConn *pConn;
  Pager pager;
  void *pSchema;             /* SQLite's schema object for this database */
  void (*xFreeSchema)(void*);
  BtCursor *pCursor;         /* open cursors */
  int nBackup;
  u8 inTrans;                /* SQLITE_TXN_NONE / READ / WRITE */
  char *zFilename;
  char *zJournal;
  u32 iChange;               /* bumped by every call that may change a tree
                             ** or the transaction (tpChanged) */
};

struct BtCursor {
  Btree *pBtree;
  TpCur *pCur;
  KeyInfo *pKeyInfo;
  BtCursor *pNext;
  Pgno pgnoRoot;
  u8 eState;
  u8 curIntKey;
  u8 wrFlag;
  u8 hints;
  int faultCode;
  u32 iSync;                 /* pBtree->iChange when row was last filled */
  TpRow row;
};

/* Something may have changed what p's cursors read: their rows are
** brought up to date (twinpage_bt_sync) before they are used again. A
** cursor whose row was filled since needs no call into Rust (SQLite's
** VDBE asks for the row's payload several times per column). */
static void tpChanged(Btree *p){ p->iChange++; }

/* A comparator context: a KeyInfo Rust may call SQLite's record compare
** with. Those made from a spec own their KeyInfo. */
typedef struct TpOrder {
  KeyInfo *pKeyInfo;
  int owned;
} TpOrder;

/************************* record comparison *************************/

#define TP_STACK_FIELDS 16

/* Compare two index records under pCtx's KeyInfo (both complete). */
static int tpCompare(void *pCtx, const void *a, int na, const void *b, int nb){
  TpOrder *o = (TpOrder*)pCtx;
  KeyInfo *pKeyInfo = o->pKeyInfo;
  union { UnpackedRecord r; char buf[sizeof(UnpackedRecord) + 8 + sizeof(Mem)*(TP_STACK_FIELDS+1)]; } u;
  UnpackedRecord *p;
  int c;
  if( pKeyInfo->nKeyField+1 <= TP_STACK_FIELDS+1 ){
    p = &u.r;
    p->aMem = (Mem*)&u.buf[ROUND8P(sizeof(UnpackedRecord))];
    p->pKeyInfo = pKeyInfo;
    p->nField = pKeyInfo->nKeyField + 1;
  }else{
    p = sqlite3VdbeAllocUnpackedRecord(pKeyInfo);
    if( p==0 ) return 0;
  }
  sqlite3VdbeRecordUnpack(pKeyInfo, nb, b, p);
  p->default_rc = 0;
  c = sqlite3VdbeRecordCompare(na, a, p);
  if( p!=&u.r ) sqlite3DbFree(pKeyInfo->db, p);
  return c;
}

/* Compare an index record with the unpacked seek key pCtx. */
static int tpProbe(void *pCtx, const void *a, int na){
  return sqlite3VdbeRecordCompare(na, a, (UnpackedRecord*)pCtx);
}

/* Collations a spec may name without a connection. */
static int binCollFunc(void*,int,const void*,int,const void*);
static int rtrimCollFunc(void*,int,const void*,int,const void*);
static int nocaseCollatingFunc(void*,int,const void*,int,const void*);
static CollSeq tpCollBinary = { (char*)"BINARY", SQLITE_UTF8, 0, binCollFunc, 0 };
static CollSeq tpCollNocase = { (char*)"NOCASE", SQLITE_UTF8, 0, nocaseCollatingFunc, 0 };
static CollSeq tpCollRtrim = { (char*)"RTRIM", SQLITE_UTF8, 0, rtrimCollFunc, 0 };
/* The connection a spec-made KeyInfo names: only read for its malloc state. */
static sqlite3 tpSpecDb;

/* The spec of an index tree's key order, stored in twinpage's catalog:
** "sqlite-record/1" NUL, nKeyField (u16 BE), nAllField (u16 BE), then per
** key field its sort flags (u8) and its collation name, NUL-terminated. */
#define TP_SPEC_TAG "sqlite-record/1"

static int tpSpecOf(KeyInfo *k, unsigned char *out, int nOut){
  int n = 0, i;
  int tag = (int)strlen(TP_SPEC_TAG) + 1;
  if( nOut < tag + 4 ) return -1;
  memcpy(out, TP_SPEC_TAG, tag); n = tag;
  out[n++] = (unsigned char)(k->nKeyField>>8); out[n++] = (unsigned char)k->nKeyField;
  out[n++] = (unsigned char)(k->nAllField>>8); out[n++] = (unsigned char)k->nAllField;
  for(i=0; i<k->nKeyField; i++){
    const char *z = k->aColl[i] ? k->aColl[i]->zName : "BINARY";
    int nz = (int)strlen(z) + 1;
    if( n + 1 + nz > nOut ) return -1;
    out[n++] = k->aSortFlags[i];
    memcpy(&out[n], z, nz); n += nz;
  }
  return n;
}

static void *tpOrderFromSpec(const unsigned char *spec, int nSpec){
  int tag = (int)strlen(TP_SPEC_TAG) + 1;
  int nKey, nAll, i, n;
  TpOrder *o;
  KeyInfo *k;
  if( nSpec < tag + 4 || memcmp(spec, TP_SPEC_TAG, tag)!=0 ) return 0;
  nKey = (spec[tag]<<8) | spec[tag+1];
  nAll = (spec[tag+2]<<8) | spec[tag+3];
  if( nKey<1 || nAll<nKey ) return 0;
  o = sqlite3_malloc(sizeof(*o));
  k = sqlite3_malloc64(SZ_KEYINFO(0) + (u64)nAll*(sizeof(CollSeq*)+1));
  if( o==0 || k==0 ){ sqlite3_free(o); sqlite3_free(k); return 0; }
  memset(k, 0, SZ_KEYINFO(0) + (u64)nAll*(sizeof(CollSeq*)+1));
  k->nRef = 1; k->enc = SQLITE_UTF8; k->nKeyField = (u16)nKey; k->nAllField = (u16)nAll;
  k->db = &tpSpecDb;
  k->aSortFlags = (u8*)&k->aColl[nAll];
  n = tag + 4;
  for(i=0; i<nKey; i++){
    const char *z;
    int nz;
    if( n>=nSpec ) goto bad;
    k->aSortFlags[i] = spec[n++];
    z = (const char*)&spec[n];
    nz = (int)strnlen(z, nSpec-n);
    if( n+nz>=nSpec ) goto bad;
    if( sqlite3StrICmp(z, "BINARY")==0 ) k->aColl[i] = &tpCollBinary;
    else if( sqlite3StrICmp(z, "NOCASE")==0 ) k->aColl[i] = &tpCollNocase;
    else if( sqlite3StrICmp(z, "RTRIM")==0 ) k->aColl[i] = &tpCollRtrim;
    else goto bad;  /* an application's collation: unknown without its connection */
    n += nz + 1;
  }
  o->pKeyInfo = k; o->owned = 1;
  return o;
bad:
  sqlite3_free(k); sqlite3_free(o);
  return 0;
}

static void tpOrderFree(void *p){
  TpOrder *o = (TpOrder*)p;
  if( o==0 ) return;
  if( o->owned ) sqlite3_free(o->pKeyInfo);
  else sqlite3KeyInfoUnref(o->pKeyInfo);
  sqlite3_free(o);
}

static const TpCallbacks tpCallbacks = { tpCompare, tpOrderFromSpec, tpOrderFree };

/************************* connection *************************/

SQLITE_PRIVATE int sqlite3BtreeOpen(
  sqlite3_vfs *pVfs, const char *zFilename, sqlite3 *db, Btree **ppBtree,
  int flags, int vfsFlags
){
  Btree *p;
  int rc = SQLITE_OK;
  int isTemp = zFilename==0 || zFilename[0]==0 || (flags & BTREE_MEMORY)!=0
            || strcmp(zFilename, ":memory:")==0 || (vfsFlags & SQLITE_OPEN_MEMORY)!=0;
  const char *zMode = 0, *zConc = 0, *zSync = 0;
  int pageSize = 0;
  *ppBtree = 0;
  /* sqlite3_deserialize's memory VFS holds SQLite pages: not ours. */
  if( pVfs && pVfs->zName && strcmp(pVfs->zName, "memdb")==0 ) return SQLITE_CANTOPEN_BKPT;
  if( !isTemp && (vfsFlags & SQLITE_OPEN_URI)!=0 ){
    zMode = sqlite3_uri_parameter(zFilename, "journal_mode");
    zConc = sqlite3_uri_parameter(zFilename, "concurrency");
    zSync = sqlite3_uri_parameter(zFilename, "synchronous");
    pageSize = (int)sqlite3_uri_int64(zFilename, "page_size", 0);
  }
  p = sqlite3MallocZero(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM_BKPT;
  p->db = db;
  p->pager.pBtree = p;
  p->pConn = twinpage_bt_open(isTemp ? 0 : zFilename, isTemp, zMode, zConc, zSync, pageSize,
      (vfsFlags & SQLITE_OPEN_READONLY)!=0, &tpCallbacks, &rc);
  if( p->pConn==0 ){
    sqlite3_free(p);
    return rc ? rc : SQLITE_CANTOPEN_BKPT;
  }
  p->pager.eMode = twinpage_bt_mode(p->pConn);
  p->zFilename = sqlite3_mprintf("%s", isTemp ? "" : twinpage_bt_filename(p->pConn));
  p->zJournal = sqlite3_mprintf("%s%s", p->zFilename, p->zFilename[0] ? "-journal" : "");
  *ppBtree = p;
  return SQLITE_OK;
}

SQLITE_PRIVATE int sqlite3BtreeClose(Btree *p){
  BtCursor *c = p->pCursor;
  while( c ){
    BtCursor *n = c->pNext;
    sqlite3BtreeCloseCursor(c);
    c = n;
  }
  twinpage_bt_rollback(p->pConn, 0);
  twinpage_bt_close(p->pConn);
  if( p->xFreeSchema && p->pSchema ) p->xFreeSchema(p->pSchema);
  sqlite3DbFree(0, p->pSchema);
  sqlite3_free(p->zFilename);
  sqlite3_free(p->zJournal);
  sqlite3_free(p);
  return SQLITE_OK;
}

SQLITE_PRIVATE int sqlite3BtreeSetCacheSize(Btree *p, int mxPage){ (void)p; (void)mxPage; return SQLITE_OK; }
SQLITE_PRIVATE int sqlite3BtreeSetSpillSize(Btree *p, int mxPage){ (void)p; return mxPage; }
#if SQLITE_MAX_MMAP_SIZE>0
SQLITE_PRIVATE int sqlite3BtreeSetMmapLimit(Btree *p, sqlite3_int64 szMmap){ (void)p; (void)szMmap; return SQLITE_OK; }
#endif
SQLITE_PRIVATE int sqlite3BtreeSetPagerFlags(Btree *p, unsigned pgFlags){
  /* synchronous: 1 off, 2 normal, 3 full, 4 extra */
  return twinpage_bt_set_sync(p->pConn, (int)(pgFlags & PAGER_SYNCHRONOUS_MASK));
}
SQLITE_PRIVATE int sqlite3BtreeSetPageSize(Btree *p, int nPagesize, int nReserve, int eFix){
  (void)nReserve; (void)eFix;
  /* The page size is fixed when twinpage creates the file (URI
  ** parameter page_size); a later request keeps the existing size. */
  return nPagesize==twinpage_bt_page_size(p->pConn) || nPagesize<=0 ? SQLITE_OK : SQLITE_READONLY;
}
SQLITE_PRIVATE int sqlite3BtreeGetPageSize(Btree *p){ return twinpage_bt_page_size(p->pConn); }
SQLITE_PRIVATE Pgno sqlite3BtreeMaxPageCount(Btree *p, Pgno mxPage){ (void)p; (void)mxPage; return 0xfffffffe; }
SQLITE_PRIVATE Pgno sqlite3BtreeLastPage(Btree *p){ return twinpage_bt_page_count(p->pConn); }
SQLITE_PRIVATE int sqlite3BtreeSecureDelete(Btree *p, int newFlag){ (void)p; (void)newFlag; return 0; }
SQLITE_PRIVATE int sqlite3BtreeGetRequestedReserve(Btree *p){ (void)p; return 0; }
SQLITE_PRIVATE int sqlite3BtreeGetReserveNoMutex(Btree *p){ (void)p; return 0; }
SQLITE_PRIVATE int sqlite3BtreeSetAutoVacuum(Btree *p, int autoVacuum){
  (void)p;
  return autoVacuum==BTREE_AUTOVACUUM_NONE ? SQLITE_OK : SQLITE_READONLY;
}
SQLITE_PRIVATE int sqlite3BtreeGetAutoVacuum(Btree *p){ (void)p; return BTREE_AUTOVACUUM_NONE; }

/* Invalidate every cursor of p that writes (or all) after a rollback. */
static void tpTripCursors(Btree *p, int errCode, int writeOnly){
  BtCursor *c;
  for(c=p->pCursor; c; c=c->pNext){
    if( writeOnly && !c->wrFlag ) continue;
    c->eState = TP_CURSOR_FAULT;
    c->faultCode = errCode ? errCode : SQLITE_ABORT_ROLLBACK;
    c->row.valid = 0;
  }
}

/* wrflag: 0 read, 1 write, 2 BEGIN EXCLUSIVE, 3 BEGIN IMMEDIATE (the
** build renumbers it). BEGIN IMMEDIATE's own OP_Transaction runs before
** its OP_AutoCommit, so autoCommit is still set there: inExplicitTxn
** tells the statements of a BEGIN ... COMMIT block apart. A writer waits
** for the others up to the connection's busy timeout (sqlite3_busy_timeout;
** none with a busy handler of the application's, as in SQLite's btree.c
** the handler would be asked instead). */
SQLITE_PRIVATE int sqlite3BtreeBeginTrans(Btree *p, int wrflag, int *pSchemaVersion){
  int rc;
  if( wrflag && twinpage_bt_read_only(p->pConn) ) return SQLITE_READONLY;
  tpChanged(p);
  rc = twinpage_bt_begin(p->pConn, wrflag, p->db->autoCommit==0, p->db->busyTimeout);
  if( rc==SQLITE_OK && wrflag ){
    /* As btree.c: the open SAVEPOINTs each get their savepoint now, before
    ** this statement changes anything. */
    rc = twinpage_bt_savepoints_open(p->pConn, p->db->nSavepoint);
  }
  if( rc==SQLITE_OK ){
    p->inTrans = (u8)twinpage_bt_txn_state(p->pConn);
    if( pSchemaVersion ){
      unsigned int v = 0;
      rc = twinpage_bt_get_meta(p->pConn, BTREE_SCHEMA_VERSION, &v);
      *pSchemaVersion = (int)v;
    }
  }
  return rc;
}
SQLITE_PRIVATE int sqlite3BtreeCommitPhaseOne(Btree *p, const char *zSuperJrnl){
  (void)p; (void)zSuperJrnl;
  return SQLITE_OK;
}
SQLITE_PRIVATE int sqlite3BtreeCommitPhaseTwo(Btree *p, int bCleanup){
  int rc;
  (void)bCleanup;
  if( p->inTrans==SQLITE_TXN_NONE ) return SQLITE_OK;
  tpChanged(p);
  rc = twinpage_bt_commit(p->pConn);
  p->inTrans = (u8)twinpage_bt_txn_state(p->pConn);
  return rc;
}
SQLITE_PRIVATE int sqlite3BtreeCommit(Btree *p){
  return sqlite3BtreeCommitPhaseTwo(p, 0);
}
SQLITE_PRIVATE int sqlite3BtreeRollback(Btree *p, int tripCode, int writeOnly){
  int rc;
  /* As btree.c: with an error code the cursors are tripped (the write
  ** cursors only, when the read transaction stays); without one they
  ** stay and find their keys again. */
  if( tripCode!=SQLITE_OK ){
    tpTripCursors(p, tripCode, writeOnly);
  }
  tpChanged(p);
  rc = twinpage_bt_rollback(p->pConn, writeOnly);
  p->inTrans = (u8)twinpage_bt_txn_state(p->pConn);
  return rc;
}
SQLITE_PRIVATE int sqlite3BtreeBeginStmt(Btree *p, int iStatement){
  return twinpage_bt_savepoints_open(p->pConn, iStatement);
}
SQLITE_PRIVATE int sqlite3BtreeSavepoint(Btree *p, int op, int iSavepoint){
  int rc;
  if( p==0 || p->inTrans!=SQLITE_TXN_WRITE ) return SQLITE_OK;
  tpChanged(p);
  rc = twinpage_bt_savepoint(p->pConn, op, iSavepoint);
  if( rc==SQLITE_OK && op==SAVEPOINT_ROLLBACK ){
    /* Cursors find their keys again (the tree changed under them). */
  }
  return rc;
}
SQLITE_PRIVATE int sqlite3BtreeTxnState(Btree *p){
  return p ? twinpage_bt_txn_state(p->pConn) : SQLITE_TXN_NONE;
}
SQLITE_PRIVATE int sqlite3BtreeIsInBackup(Btree *p){ return p->nBackup; }
SQLITE_PRIVATE void *sqlite3BtreeSchema(Btree *p, int nBytes, void(*xFree)(void *)){
  if( p->pSchema==0 && nBytes ){
    p->pSchema = sqlite3DbMallocZero(0, nBytes);
    p->xFreeSchema = xFree;
  }
  return p->pSchema;
}
SQLITE_PRIVATE int sqlite3BtreeSchemaLocked(Btree *p){ (void)p; return SQLITE_OK; }

#ifndef SQLITE_OMIT_WAL
SQLITE_PRIVATE int sqlite3BtreeCheckpoint(Btree *p, int eMode, int *pnLog, int *pnCkpt){
  if( p==0 ) return SQLITE_OK;
  if( p->inTrans!=SQLITE_TXN_NONE ) return SQLITE_LOCKED;
  return twinpage_bt_checkpoint(p->pConn, eMode, pnLog, pnCkpt);
}
#endif

SQLITE_PRIVATE const char *sqlite3BtreeGetFilename(Btree *p){ return p->zFilename; }
SQLITE_PRIVATE const char *sqlite3BtreeGetJournalname(Btree *p){ return p->zJournal; }

/* VACUUM copies a rebuilt database back page by page; twinpage pages are
** not SQLite's, so it is refused (twinpage reuses free pages itself). */
SQLITE_PRIVATE int sqlite3BtreeCopyFile(Btree *pTo, Btree *pFrom){
  (void)pTo; (void)pFrom;
  return SQLITE_ERROR;
}
SQLITE_PRIVATE int sqlite3BtreeIncrVacuum(Btree *p){ (void)p; return SQLITE_DONE; }

SQLITE_PRIVATE int sqlite3BtreeCreateTable(Btree *p, Pgno *piTable, int flags){
  unsigned int i = 0;
  int rc;
  tpChanged(p);
  rc = twinpage_bt_create_table(p->pConn, (flags & BTREE_INTKEY)!=0, 0, 0, &i);
  *piTable = i;
  return rc;
}

/* An index tree gets its key order's spec when its first cursor opens for
** writing (SQLite creates the tree before it knows the KeyInfo). */
SQLITE_PRIVATE int sqlite3BtreeDropTable(Btree *p, int iTable, int *piMoved){
  *piMoved = 0;
  tpChanged(p);
  return twinpage_bt_drop_table(p->pConn, (unsigned int)iTable);
}
SQLITE_PRIVATE int sqlite3BtreeClearTable(Btree *p, int iTable, i64 *pnChange){
  sqlite3_int64 n = 0;
  int rc;
  tpChanged(p);
  rc = twinpage_bt_clear_table(p->pConn, (unsigned int)iTable, &n);
  if( pnChange ) *pnChange += n;
  return rc;
}
SQLITE_PRIVATE int sqlite3BtreeClearTableOfCursor(BtCursor *pCur){
  return sqlite3BtreeClearTable(pCur->pBtree, (int)pCur->pgnoRoot, 0);
}
SQLITE_PRIVATE int sqlite3BtreeTripAllCursors(Btree *p, int errCode, int writeOnly){
  if( p ) tpTripCursors(p, errCode, writeOnly);
  return SQLITE_OK;
}

SQLITE_PRIVATE void sqlite3BtreeGetMeta(Btree *p, int idx, u32 *pValue){
  unsigned int v = 0;
  if( idx==BTREE_DATA_VERSION ){
    *pValue = twinpage_bt_data_version(p->pConn);
    return;
  }
  twinpage_bt_get_meta(p->pConn, idx, &v);
  *pValue = v;
}
SQLITE_PRIVATE int sqlite3BtreeUpdateMeta(Btree *p, int idx, u32 value){
  tpChanged(p);
  return twinpage_bt_update_meta(p->pConn, idx, value);
}
SQLITE_PRIVATE int sqlite3BtreeNewDb(Btree *p){
  int i, rc = SQLITE_OK;
  tpChanged(p);
  for(i=1; i<SQLITE_N_BTREE_META && rc==SQLITE_OK; i++){
    if( i!=BTREE_DATA_VERSION ) rc = twinpage_bt_update_meta(p->pConn, i, 0);
  }
  return rc;
}

SQLITE_PRIVATE int sqlite3BtreeSetVersion(Btree *p, int iVersion){ (void)p; (void)iVersion; return SQLITE_OK; }
SQLITE_PRIVATE int sqlite3BtreeIsReadonly(Btree *p){ return twinpage_bt_read_only(p->pConn); }
SQLITE_PRIVATE int sqlite3HeaderSizeBtree(void){ return ROUND8(sizeof(BtCursor)); }
SQLITE_PRIVATE void sqlite3BtreeClearCache(Btree *p){ (void)p; }
SQLITE_PRIVATE struct Pager *sqlite3BtreePager(Btree *p){ return &p->pager; }

#ifndef SQLITE_OMIT_INTEGRITY_CHECK
SQLITE_PRIVATE int sqlite3BtreeIntegrityCheck(
  sqlite3 *db, Btree *p, Pgno *aRoot, sqlite3_value *aCnt, int nRoot,
  int mxErr, int *pnErr, char **pzOut
){
  int i, rc, nErr = 0;
  char *zErr = 0;
  sqlite3_int64 *aN;
  (void)db; (void)mxErr;
  *pnErr = 0;
  *pzOut = 0;
  aN = sqlite3_malloc64(sizeof(sqlite3_int64)*(nRoot>0 ? nRoot : 1));
  if( aN==0 ) return SQLITE_NOMEM_BKPT;
  rc = twinpage_bt_integrity(p->pConn, aRoot, aN, nRoot, &zErr, &nErr);
  if( rc==SQLITE_OK ){
    for(i=0; i<nRoot; i++) sqlite3MemSetArrayInt64(aCnt, i, aN[i]);
    if( nErr ){
      *pnErr = nErr;
      *pzOut = sqlite3_mprintf("%s", zErr);
    }
  }
  twinpage_bt_free_string(zErr);
  sqlite3_free(aN);
  return rc;
}
#endif

/************************* cursors *************************/

SQLITE_PRIVATE int sqlite3BtreeCursorSize(void){ return ROUND8(sizeof(BtCursor)); }
SQLITE_PRIVATE void sqlite3BtreeCursorZero(BtCursor *p){ memset(p, 0, sizeof(*p)); p->eState = TP_CURSOR_INVALID; }

static BtCursor tpFakeCursor;
SQLITE_PRIVATE BtCursor *sqlite3BtreeFakeValidCursor(void){
  tpFakeCursor.eState = TP_CURSOR_VALID;
  return &tpFakeCursor;
}

SQLITE_PRIVATE int sqlite3BtreeCursor(
  Btree *p, Pgno iTable, int wrFlag, struct KeyInfo *pKeyInfo, BtCursor *pCur
){
  int rc = SQLITE_OK;
  TpOrder *o = 0;
  if( wrFlag && twinpage_bt_read_only(p->pConn) ) return SQLITE_READONLY;
  if( pKeyInfo ){
    o = sqlite3_malloc(sizeof(*o));
    if( o==0 ) return SQLITE_NOMEM_BKPT;
    o->pKeyInfo = sqlite3KeyInfoRef(pKeyInfo);
    o->owned = 0;
  }
  pCur->pBtree = p;
  pCur->pKeyInfo = pKeyInfo;
  pCur->pgnoRoot = iTable;
  pCur->curIntKey = pKeyInfo==0;
  pCur->wrFlag = wrFlag!=0;
  pCur->eState = TP_CURSOR_INVALID;
  pCur->pCur = twinpage_bt_cursor(p->pConn, iTable, pKeyInfo==0, wrFlag!=0, o, &rc);
  if( pCur->pCur==0 ){
    /* Rust took o and freed it on failure. OP_OpenRead/OpenWrite ignore
    ** this function's result: the fault also makes the cursor's first
    ** use fail with it. */
    if( rc==SQLITE_OK ) rc = SQLITE_ERROR;
    pCur->eState = TP_CURSOR_FAULT;
    pCur->faultCode = rc;
    return rc;
  }
  if( pKeyInfo && wrFlag ){
    /* Record the index's key order in twinpage's catalog (once). This
    ** writes, so it can fail (a lost conflict): the cursor's first use
    ** reports that (the VDBE does not look at what this returns). */
    unsigned char spec[512];
    int n = tpSpecOf(pKeyInfo, spec, (int)sizeof(spec));
    if( n>0 ){
      int rc2 = twinpage_bt_create_table(p->pConn, -1, spec, n, &iTable);
      if( rc2!=SQLITE_OK ){
        pCur->eState = TP_CURSOR_FAULT;
        pCur->faultCode = rc2;
      }
    }
  }
  pCur->pNext = p->pCursor;
  p->pCursor = pCur;
  return SQLITE_OK;
}

SQLITE_PRIVATE int sqlite3BtreeCloseCursor(BtCursor *pCur){
  Btree *p = pCur->pBtree;
  if( p ){
    BtCursor **pp = &p->pCursor;
    while( *pp && *pp!=pCur ) pp = &(*pp)->pNext;
    if( *pp ) *pp = pCur->pNext;
    if( pCur->pCur ) twinpage_bt_cursor_close(pCur->pCur);
  }
  pCur->pCur = 0;
  pCur->pBtree = 0;
  pCur->eState = TP_CURSOR_INVALID;
  return SQLITE_OK;
}

#ifdef SQLITE_DEBUG
SQLITE_PRIVATE int sqlite3BtreeClosesWithCursor(Btree *pBtree, BtCursor *pCur){
  BtCursor *c;
  for(c=pBtree->pCursor; c; c=c->pNext) if( c==pCur ) return 1;
  return 0;
}
#endif

SQLITE_PRIVATE void sqlite3BtreeCursorHintFlags(BtCursor *pCur, unsigned x){ pCur->hints = (u8)x; }
SQLITE_PRIVATE int sqlite3BtreeCursorHasHint(BtCursor *pCsr, unsigned int mask){ return (pCsr->hints & mask)!=0; }
#ifdef SQLITE_ENABLE_CURSOR_HINTS
SQLITE_PRIVATE void sqlite3BtreeCursorHint(BtCursor *pCsr, int eHintType, ...){ (void)pCsr; (void)eHintType; }
#endif

/* Take the row a move left; a fault becomes the cursor's state. */
static int tpAfterMove(BtCursor *pCur, int rc){
  if( rc!=SQLITE_OK ){
    pCur->eState = TP_CURSOR_INVALID;
    return rc;
  }
  pCur->iSync = pCur->pBtree->iChange;
  pCur->eState = pCur->row.valid ? TP_CURSOR_VALID : TP_CURSOR_INVALID;
  return SQLITE_OK;
}

static int tpFault(BtCursor *pCur){
  if( pCur->eState==TP_CURSOR_FAULT ) return pCur->faultCode;
  if( pCur->pCur==0 ) return SQLITE_MISUSE_BKPT;
  return SQLITE_OK;
}

SQLITE_PRIVATE int sqlite3BtreeTableMoveto(BtCursor *pCur, i64 intKey, int biasRight, int *pRes){
  int rc = tpFault(pCur);
  (void)biasRight;
  if( rc ) return rc;
  rc = twinpage_bt_seek_int(pCur->pCur, intKey, pRes, &pCur->row);
  return tpAfterMove(pCur, rc);
}

SQLITE_PRIVATE int sqlite3BtreeIndexMoveto(BtCursor *pCur, UnpackedRecord *pIdxKey, int *pRes){
  int rc = tpFault(pCur);
  if( rc ) return rc;
  pIdxKey->errCode = 0;
  rc = twinpage_bt_seek_probe(pCur->pCur, tpProbe, pIdxKey, pRes, &pCur->row);
  if( rc==SQLITE_OK && pIdxKey->errCode ) rc = pIdxKey->errCode;
  return tpAfterMove(pCur, rc);
}

SQLITE_PRIVATE int sqlite3BtreeCursorHasMoved(BtCursor *pCur){
  int moved = 0, different = 0;
  if( pCur->eState!=TP_CURSOR_VALID ) return 1;
  if( pCur->pCur==0 ) return 0;  /* sqlite3BtreeFakeValidCursor() */
  if( pCur->iSync==pCur->pBtree->iChange ) return 0;
  if( twinpage_bt_sync(pCur->pCur, &pCur->row, &moved, &different)!=SQLITE_OK ) return 1;
  pCur->iSync = pCur->pBtree->iChange;
  if( !pCur->row.valid ) pCur->eState = TP_CURSOR_INVALID;
  return different || !pCur->row.valid;
}

SQLITE_PRIVATE int sqlite3BtreeCursorRestore(BtCursor *pCur, int *pDifferentRow){
  int moved = 0, different = 0, rc;
  rc = tpFault(pCur);
  if( rc ) return rc;
  if( pCur->eState==TP_CURSOR_VALID && pCur->iSync==pCur->pBtree->iChange ){
    *pDifferentRow = 0;
    return SQLITE_OK;
  }
  rc = twinpage_bt_sync(pCur->pCur, &pCur->row, &moved, &different);
  *pDifferentRow = different || !pCur->row.valid;
  return tpAfterMove(pCur, rc);
}

SQLITE_PRIVATE int sqlite3BtreeFirst(BtCursor *pCur, int *pRes){
  int rc = tpFault(pCur);
  if( rc ) return rc;
  rc = twinpage_bt_first(pCur->pCur, 0, &pCur->row);
  *pRes = pCur->row.valid ? 0 : 1;
  return tpAfterMove(pCur, rc);
}
SQLITE_PRIVATE int sqlite3BtreeLast(BtCursor *pCur, int *pRes){
  int rc = tpFault(pCur);
  if( rc ) return rc;
  rc = twinpage_bt_first(pCur->pCur, 1, &pCur->row);
  *pRes = pCur->row.valid ? 0 : 1;
  return tpAfterMove(pCur, rc);
}

static int tpStep(BtCursor *pCur, int forward){
  int rc = tpFault(pCur);
  if( rc ) return rc;
  if( pCur->eState!=TP_CURSOR_VALID ) return SQLITE_DONE;
  rc = twinpage_bt_step(pCur->pCur, forward, &pCur->row);
  rc = tpAfterMove(pCur, rc);
  if( rc==SQLITE_OK && !pCur->row.valid ) return SQLITE_DONE;
  return rc;
}
SQLITE_PRIVATE int sqlite3BtreeNext(BtCursor *pCur, int flags){ (void)flags; return tpStep(pCur, 1); }
SQLITE_PRIVATE int sqlite3BtreePrevious(BtCursor *pCur, int flags){ (void)flags; return tpStep(pCur, 0); }
SQLITE_PRIVATE int sqlite3BtreeEof(BtCursor *pCur){ return pCur->eState!=TP_CURSOR_VALID; }

/* The row under the cursor, found again if the tree changed. */
static void tpSync(BtCursor *pCur){
  int moved = 0, different = 0;
  if( pCur->pCur && pCur->eState==TP_CURSOR_VALID
   && pCur->iSync!=pCur->pBtree->iChange ){
    if( twinpage_bt_sync(pCur->pCur, &pCur->row, &moved, &different)!=SQLITE_OK || !pCur->row.valid ){
      pCur->row.valid = 0;
      pCur->row.nData = 0;
    }else{
      pCur->iSync = pCur->pBtree->iChange;
    }
  }
}

SQLITE_PRIVATE i64 sqlite3BtreeIntegerKey(BtCursor *pCur){ return pCur->row.nKey; }
SQLITE_PRIVATE void sqlite3BtreeCursorPin(BtCursor *pCur){ (void)pCur; }
SQLITE_PRIVATE void sqlite3BtreeCursorUnpin(BtCursor *pCur){ (void)pCur; }
SQLITE_PRIVATE i64 sqlite3BtreeOffset(BtCursor *pCur){ (void)pCur; return 0; }
SQLITE_PRIVATE u32 sqlite3BtreePayloadSize(BtCursor *pCur){
  tpSync(pCur);
  return pCur->row.nData;
}
SQLITE_PRIVATE sqlite3_int64 sqlite3BtreeMaxRecordSize(BtCursor *pCur){
  (void)pCur;
  return (sqlite3_int64)0x7fffffff;
}
SQLITE_PRIVATE int sqlite3BtreePayload(BtCursor *pCur, u32 offset, u32 amt, void *pBuf){
  tpSync(pCur);
  if( !pCur->row.valid ) return SQLITE_CORRUPT_BKPT;
  if( (u64)offset + amt > pCur->row.nData ) return SQLITE_CORRUPT_BKPT;
  memcpy(pBuf, pCur->row.pData + offset, amt);
  return SQLITE_OK;
}
SQLITE_PRIVATE const void *sqlite3BtreePayloadFetch(BtCursor *pCur, u32 *pAmt){
  tpSync(pCur);
  *pAmt = pCur->row.valid ? pCur->row.nData : 0;
  return pCur->row.pData;
}
#ifndef SQLITE_OMIT_INCRBLOB
SQLITE_PRIVATE int sqlite3BtreePayloadChecked(BtCursor *pCur, u32 offset, u32 amt, void *pBuf){
  int rc = tpFault(pCur);
  if( rc ) return rc;
  return sqlite3BtreePayload(pCur, offset, amt, pBuf);
}
/* sqlite3_blob_write: the row's record with the bytes replaced. */
SQLITE_PRIVATE int sqlite3BtreePutData(BtCursor *pCur, u32 offset, u32 amt, void *z){
  int rc = tpFault(pCur);
  unsigned char *buf;
  sqlite3_int64 key;
  if( rc ) return rc;
  if( !pCur->wrFlag ) return SQLITE_READONLY;
  tpSync(pCur);
  if( !pCur->row.valid ) return SQLITE_ABORT;
  if( (u64)offset + amt > pCur->row.nData ) return SQLITE_CORRUPT_BKPT;
  buf = sqlite3_malloc64(pCur->row.nData ? pCur->row.nData : 1);
  if( buf==0 ) return SQLITE_NOMEM_BKPT;
  memcpy(buf, pCur->row.pData, pCur->row.nData);
  memcpy(buf + offset, z, amt);
  key = pCur->row.nKey;
  tpChanged(pCur->pBtree);
  rc = twinpage_bt_insert(pCur->pCur, key, 0, 0, buf, (int)pCur->row.nData, 0, 1, &pCur->row);
  sqlite3_free(buf);
  return tpAfterMove(pCur, rc);
}
SQLITE_PRIVATE void sqlite3BtreeIncrblobCursor(BtCursor *pCur){ (void)pCur; }
#endif
SQLITE_PRIVATE void sqlite3BtreeClearCursor(BtCursor *pCur){
  pCur->eState = TP_CURSOR_INVALID;
  pCur->row.valid = 0;
}

SQLITE_PRIVATE int sqlite3BtreeInsert(BtCursor *pCur, const BtreePayload *pX, int flags, int seekResult){
  int rc = tpFault(pCur);
  (void)seekResult;
  if( rc ) return rc;
  if( !pCur->wrFlag ) return SQLITE_READONLY;
  /* The VDBE's transfer optimization: sqlite3BtreeTransferRow (OP_RowCell)
  ** already inserted the row this call would write from a prepared cell. */
  if( flags & BTREE_PREFORMAT ) return SQLITE_OK;
  tpChanged(pCur->pBtree);
  if( pCur->curIntKey ){
    rc = twinpage_bt_insert(pCur->pCur, pX->nKey, 0, 0, pX->pData, pX->nData, pX->nZero,
        (flags & BTREE_SAVEPOSITION)!=0, &pCur->row);
  }else{
    if( pX->nKey<0 || pX->nKey>0x7fffffff ) return SQLITE_TOOBIG;
    rc = twinpage_bt_insert(pCur->pCur, 0, pX->pKey, (int)pX->nKey, 0, 0, 0,
        (flags & BTREE_SAVEPOSITION)!=0, &pCur->row);
  }
  return tpAfterMove(pCur, rc);
}

SQLITE_PRIVATE int sqlite3BtreeDelete(BtCursor *pCur, u8 flags){
  int rc = tpFault(pCur);
  (void)flags;
  if( rc ) return rc;
  if( !pCur->wrFlag ) return SQLITE_READONLY;
  if( pCur->eState!=TP_CURSOR_VALID ) return SQLITE_CORRUPT_BKPT;
  tpChanged(pCur->pBtree);
  rc = twinpage_bt_delete(pCur->pCur, &pCur->row);
  if( rc ) return rc;
  /* The cursor keeps the deleted key: the next step lands where it would
  ** have without the delete (BTREE_SAVEPOSITION's contract). */
  return SQLITE_OK;
}

SQLITE_PRIVATE int sqlite3BtreeTransferRow(BtCursor *pDest, BtCursor *pSrc, i64 iKey){
  BtreePayload x;
  int rc;
  tpSync(pSrc);
  if( !pSrc->row.valid ) return SQLITE_CORRUPT_BKPT;
  memset(&x, 0, sizeof(x));
  if( pDest->curIntKey ){
    x.nKey = iKey;
    x.pData = pSrc->row.pData;
    x.nData = (int)pSrc->row.nData;
  }else{
    x.pKey = pSrc->row.pData;
    x.nKey = pSrc->row.nData;
  }
  rc = sqlite3BtreeInsert(pDest, &x, 0, 0);
  return rc;
}

SQLITE_PRIVATE int sqlite3BtreeCount(sqlite3 *db, BtCursor *pCur, i64 *pnEntry){
  sqlite3_int64 n = 0;
  int rc = tpFault(pCur);
  (void)db;
  if( rc ) return rc;
  rc = twinpage_bt_count(pCur->pCur, &n);
  *pnEntry = n;
  return rc;
}
SQLITE_PRIVATE i64 sqlite3BtreeRowCountEst(BtCursor *pCur){ (void)pCur; return -1; }

#ifndef NDEBUG
SQLITE_PRIVATE int sqlite3BtreeCursorIsValid(BtCursor *pCur){ return pCur && pCur->eState==TP_CURSOR_VALID; }
#endif
SQLITE_PRIVATE int sqlite3BtreeCursorIsValidNN(BtCursor *pCur){ return pCur->eState==TP_CURSOR_VALID; }

/************************* what reaches SQLite's pager *************************/
#include "tp_pager.c"
