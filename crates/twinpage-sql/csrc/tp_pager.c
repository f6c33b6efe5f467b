/*
** twinpage-sql: the calls of SQLite's pager that the rest of SQLite makes
** (pragmas, sqlite3_file_control, the multi-database commit, VACUUM),
** answered from twinpage's state; and the backup API, refused.
**
** Journal modes. SQLite numbers its modes 0..5 (delete, persist, off,
** truncate, memory, wal); twinpage's modes (and mode+protocol pairs) are
** numbered from TP_MODE_BASE in the order twinpage_bt_mode_name lists them.
** sqlite3JournalModename names both ranges, so `PRAGMA journal_mode=dhl-cc`
** parses and `PRAGMA journal_mode` reports twinpage's name. The mode SQLite
** itself sees (sqlite3PagerGetJournalMode) is the nearest SQLite mode:
** twinpage's delete, persist, off, truncate and wal as themselves, every
** other twinpage mode as memory (its own journal, none on disk SQLite
** would have to manage).
*/

#define TP_MODE_BASE 6

static const char *tpStockJournalModename(int eMode);

SQLITE_PRIVATE const char *sqlite3JournalModename(int eMode){
  if( eMode>=0 && eMode<TP_MODE_BASE ) return tpStockJournalModename(eMode);
  if( eMode>=TP_MODE_BASE && eMode<TP_MODE_BASE+twinpage_bt_mode_count() ){
    return twinpage_bt_mode_name(eMode-TP_MODE_BASE);
  }
  return 0;
}

/* twinpage's mode index of a SQLite mode number (-1: none). */
static int tpModeIndex(int eMode){
  const char *z = sqlite3JournalModename(eMode);
  int i, n = twinpage_bt_mode_count();
  if( eMode>=TP_MODE_BASE ) return eMode<TP_MODE_BASE+n ? eMode-TP_MODE_BASE : -1;
  if( z==0 || eMode==PAGER_JOURNALMODE_MEMORY ) return -1;
  for(i=0; i<n; i++){
    if( strcmp(twinpage_bt_mode_name(i), z)==0 ) return i;
  }
  return -1;
}

/* The SQLite mode nearest to twinpage's mode i (see above). */
static int tpSqliteMode(int i){
  const char *z = twinpage_bt_mode_name(i);
  int e;
  for(e=0; e<TP_MODE_BASE; e++){
    if( e!=PAGER_JOURNALMODE_MEMORY && strcmp(tpStockJournalModename(e), z)==0 ) return e;
  }
  return PAGER_JOURNALMODE_MEMORY;
}

SQLITE_PRIVATE int sqlite3PagerGetJournalMode(Pager *pPager){
  return tpSqliteMode(twinpage_bt_mode(pPager->pBtree->pConn));
}

SQLITE_PRIVATE int sqlite3PagerOkToChangeJournalMode(Pager *pPager){
  return pPager->pBtree->inTrans!=SQLITE_TXN_WRITE;
}

/* Select a mode; returns the number of the mode in effect (a twinpage
** number, so the pragma reports twinpage's name). Asking for the mode
** SQLite already sees is a query. */
SQLITE_PRIVATE int sqlite3PagerSetJournalMode(Pager *pPager, int eMode){
  TpConn *c = pPager->pBtree->pConn;
  int cur = twinpage_bt_mode(c);
  if( eMode!=tpSqliteMode(cur) || eMode>=TP_MODE_BASE ){
    int want = tpModeIndex(eMode);
    if( want>=0 && want!=cur && pPager->pBtree->inTrans!=SQLITE_TXN_WRITE ){
      twinpage_bt_set_mode(c, want);
      cur = twinpage_bt_mode(c);
    }
  }
  pPager->eMode = TP_MODE_BASE + cur;
  return pPager->eMode;
}

SQLITE_PRIVATE int sqlite3PagerMemUsed(Pager *pPager){ (void)pPager; return 0; }
SQLITE_PRIVATE void sqlite3PagerCacheStat(Pager *pPager, int eStat, int reset, u64 *pnVal){
  (void)pPager; (void)eStat; (void)reset;
  *pnVal = 0;
}
SQLITE_PRIVATE int sqlite3PagerIsMemdb(Pager *pPager){ return twinpage_bt_is_temp(pPager->pBtree->pConn); }
SQLITE_PRIVATE int sqlite3PagerExclusiveLock(Pager *pPager){ (void)pPager; return SQLITE_OK; }
#ifndef SQLITE_OMIT_WAL
SQLITE_PRIVATE int sqlite3PagerWalCallback(Pager *pPager){ (void)pPager; return 0; }
SQLITE_PRIVATE int sqlite3PagerWalSupported(Pager *pPager){ return !sqlite3PagerIsMemdb(pPager); }
SQLITE_PRIVATE int sqlite3PagerCloseWal(Pager *pPager, sqlite3 *db){ (void)pPager; (void)db; return SQLITE_OK; }
#endif
SQLITE_PRIVATE const char *sqlite3PagerFilename(const Pager *pPager, int nullIfMemDb){
  (void)nullIfMemDb;
  return pPager->pBtree->zFilename;
}
SQLITE_PRIVATE int sqlite3PagerLockingMode(Pager *pPager, int eMode){
  (void)pPager; (void)eMode;
  return PAGER_LOCKINGMODE_NORMAL;
}
SQLITE_PRIVATE i64 sqlite3PagerJournalSizeLimit(Pager *pPager, i64 iLimit){
  (void)pPager; (void)iLimit;
  return -1;
}

/* twinpage owns the database file: SQLite sees a file without methods,
** which its callers treat as "no such file control". */
static sqlite3_file tpNoFile;
SQLITE_PRIVATE sqlite3_file *sqlite3PagerFile(Pager *pPager){ (void)pPager; return &tpNoFile; }
SQLITE_PRIVATE sqlite3_file *sqlite3PagerJrnlFile(Pager *pPager){ (void)pPager; return &tpNoFile; }
SQLITE_PRIVATE sqlite3_vfs *sqlite3PagerVfs(Pager *pPager){ (void)pPager; return sqlite3_vfs_find(0); }
SQLITE_PRIVATE u32 sqlite3PagerDataVersion(Pager *pPager){
  return twinpage_bt_data_version(pPager->pBtree->pConn);
}
SQLITE_PRIVATE void sqlite3PagerShrink(Pager *pPager){ (void)pPager; }
SQLITE_PRIVATE int sqlite3PagerFlush(Pager *pPager){ (void)pPager; return SQLITE_OK; }

/* SQLite pages do not exist in a twinpage file (sqlite3_serialize and the
** page-level virtual tables read them): an error, never a fake page. */
SQLITE_PRIVATE int sqlite3PagerGet(Pager *pPager, Pgno pgno, DbPage **ppPage, int clrFlag){
  (void)pPager; (void)pgno; (void)clrFlag;
  *ppPage = 0;
  return SQLITE_ERROR;
}
SQLITE_PRIVATE void *sqlite3PagerGetData(DbPage *pPg){ (void)pPg; return 0; }
SQLITE_PRIVATE void sqlite3PagerUnref(DbPage *pPg){ (void)pPg; }

SQLITE_API sqlite3_file *sqlite3_database_file_object(const char *zName){ (void)zName; return 0; }

/* A serialization is an SQLite file image; a twinpage database has none:
** NULL, SQLite's answer when it cannot serialize. */
SQLITE_API unsigned char *sqlite3_serialize(
  sqlite3 *db, const char *zSchema, sqlite3_int64 *piSize, unsigned int mFlags
){
  (void)db; (void)zSchema; (void)mFlags;
  if( piSize ) *piSize = -1;
  return 0;
}

/* Shared-cache mode does not exist here: connections of one process share
** a twinpage database anyway (twinpage::Db::open). */
SQLITE_API int sqlite3_enable_shared_cache(int enable){ (void)enable; return SQLITE_OK; }

/************************* backup *************************/

/* The backup API copies SQLite pages; twinpage files have none. */
SQLITE_API sqlite3_backup *sqlite3_backup_init(
  sqlite3 *pDestDb, const char *zDestDb, sqlite3 *pSrcDb, const char *zSrcDb
){
  (void)zDestDb; (void)pSrcDb; (void)zSrcDb;
#ifdef SQLITE_ENABLE_API_ARMOR
  if( !sqlite3SafetyCheckOk(pDestDb) ){
    (void)SQLITE_MISUSE_BKPT;
    return 0;
  }
#endif
  sqlite3_mutex_enter(pDestDb->mutex);
  sqlite3ErrorWithMsg(pDestDb, SQLITE_ERROR,
      "the backup API copies SQLite pages, which twinpage files do not have");
  sqlite3_mutex_leave(pDestDb->mutex);
  return 0;
}
SQLITE_API int sqlite3_backup_step(sqlite3_backup *p, int nPage){ (void)p; (void)nPage; return SQLITE_MISUSE; }
SQLITE_API int sqlite3_backup_finish(sqlite3_backup *p){ return p ? SQLITE_MISUSE : SQLITE_OK; }
SQLITE_API int sqlite3_backup_remaining(sqlite3_backup *p){ (void)p; return 0; }
SQLITE_API int sqlite3_backup_pagecount(sqlite3_backup *p){ (void)p; return 0; }
